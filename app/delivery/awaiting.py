"""Deliveries that waited for an address (``await_address_seconds``), when a worker leases
them: it reads the recipient's settings on the delivery's shard, takes the address its
profile gives now (``app.recipients.awaiting``) and either sends it like any delivery or
records what becomes of it instead: waiting again (``awaiting_address``, indexed so a
profile change releases it: ``streams.delivery.address_waits``), SUPPRESSED, deferred for quiet
hours, or EXPIRED.

An escalation step that comes due is first asked whether it is needed
(``app.delivery.steps``). Deliveries sent later are looked at again when they come due
(``send_at``/``delay``): the recipient's settings and the suppression list as they are then
decide. A batch of them is read in one round trip (a pipeline of the recipients' settings,
one HMGET of the list): at 10,000 due a second, two round trips a delivery one after the
other held a worker's lane longer than the sends (``bench/schedule.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec
from redis.asyncio import Redis

from app.catalog import Catalog
from app.delivery import steps
from app.recipients import awaiting as rules
from streams.delivery import address_waits
from streams.delivery.decisions import Decision, Deferred
from streams.delivery.leases import LeasedDelivery
from streams.delivery.store import FinishReply, Outcome
from streams.recipients.read import RecipientSettings
from streams.recipients.settings import AddressDigest
from streams.recipients.suppressions import Suppression, SuppressionStore


@dataclass(slots=True)
class Looked:
    """Leased deliveries after a look: those to route and send (``held``: with the address
    found, or not waiting), those decided here, and each one sent back to wait with the
    settings version it was decided at (by delivery id)."""

    held: list[LeasedDelivery] = field(default_factory=list)
    decided: list[tuple[LeasedDelivery, Decision]] = field(default_factory=list)
    waiting: dict[str, tuple[LeasedDelivery, int]] = field(default_factory=dict)


class AddressAwaiter:
    """Looks up the address of leased deliveries waiting for one."""

    def __init__(
        self,
        redis: Redis,
        catalog: Catalog,
        suppressions: SuppressionStore,
        address_digest: AddressDigest,
    ) -> None:
        self.redis = redis
        self.catalog = catalog
        self.suppressions = suppressions
        self.address_digest = address_digest

    async def look(self, held: Sequence[LeasedDelivery], now_ms: int) -> Looked:
        """Sort ``held``: each one waiting for an address gets it, or its decision; each one
        sent later is decided again by the recipient's settings as they are now."""
        if not [leased for leased in held if leased.item.await_until_ms or leased.item.send_at_ms]:
            return Looked(held=list(held))  # the usual batch: nothing waits for anything
        looked = Looked()
        skipped = await steps.skipped(self.redis, held)
        again = await self._read_again([
            leased for leased in held
            if leased.item.send_at_ms and _has_address(leased)
            and leased.item.delivery_id not in skipped
        ])  # fmt: skip
        for leased in held:
            item = leased.item
            if item.send_at_ms and leased.lease.version == 1:
                leased = msgspec.structs.replace(leased, came_due=True)  # noqa: PLW2901
            if item.delivery_id in skipped:  # a step not needed: nothing else matters
                looked.decided.append((leased, skipped[item.delivery_id]))
                continue
            if _has_address(leased):
                if item.send_at_ms:
                    self._look_again(leased, *again[item.delivery_id], now_ms, looked)
                else:
                    looked.held.append(leased)
                continue
            raw = await self.redis.hgetall(leased.shard.recipient(item.recipient_id))
            settings = RecipientSettings.from_hash(raw)
            address = rules.address_for(settings.profile, item.channel)
            if not address:
                decision = rules.without_address(item, now_ms)
                looked.decided.append((leased, decision))
                if isinstance(decision, Deferred):
                    looked.waiting[item.delivery_id] = (leased, settings.version)
                continue
            # From now on an item like any other: a retry or deferral keeps the address.
            found = msgspec.structs.replace(item, address=address, await_until_ms=0)
            with_address = msgspec.structs.replace(leased, item=found)
            decided = await self._decide(with_address, settings, now_ms)
            if decided is None:
                looked.held.append(with_address)
            else:
                looked.decided.append((with_address, decided))
        return looked

    async def _read_again(
        self, due: Sequence[LeasedDelivery]
    ) -> dict[str, tuple[RecipientSettings, Suppression | None]]:
        """The recipient's settings and the address's suppression entry of each delivery sent
        later that came due (by delivery id), read together: one pipeline of HGETALLs (the
        recipients are on the shard the batch was leased from) and one HMGET."""
        if not due:
            return {}
        recipients = list(
            dict.fromkeys(leased.shard.recipient(leased.item.recipient_id) for leased in due)
        )
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in recipients:
                pipe.hgetall(key)
            raw = dict(zip(recipients, await pipe.execute(), strict=True))
        addresses = [
            (leased.item.channel, self.address_digest(leased.item.address)) for leased in due
        ]
        listed = await self.suppressions.get_many(addresses)
        return {
            leased.item.delivery_id: (
                RecipientSettings.from_hash(raw[leased.shard.recipient(leased.item.recipient_id)]),
                listed[address],
            )
            for leased, address in zip(due, addresses, strict=True)
        }

    def _look_again(
        self,
        leased: LeasedDelivery,
        settings: RecipientSettings,
        listed: Suppression | None,
        now_ms: int,
        looked: Looked,
    ) -> None:
        """A delivery sent later, now due: the recipient may have switched it off, its
        address may have gone on the suppression list, or it may be their quiet hours."""
        decided = self._decision(leased, settings, listed, now_ms)
        if decided is None:
            looked.held.append(leased)
        else:
            looked.decided.append((leased, decided))

    async def _decide(
        self, leased: LeasedDelivery, settings: RecipientSettings, now_ms: int
    ) -> Decision | None:
        item = leased.item
        listed = await self.suppressions.get(item.channel, self.address_digest(item.address))
        return self._decision(leased, settings, listed, now_ms)

    def _decision(
        self,
        leased: LeasedDelivery,
        settings: RecipientSettings,
        listed: Suppression | None,
        now_ms: int,
    ) -> Decision | None:
        item = leased.item
        type_config = self.catalog.types.get(item.notification_type)
        opt_out = type_config.opt_out if type_config is not None else False
        return rules.with_address(
            item,
            settings,
            self.address_digest,
            opt_out=opt_out,
            listed=listed,
            routable=bool(self.catalog.provider_order(item.channel, item.address)),
            now_ms=now_ms,
        )

    async def index(
        self, looked: Looked, outcomes: Sequence[Outcome], replies: Sequence[FinishReply]
    ) -> None:
        """Index the deliveries recorded (``outcomes``, ``replies``: as ``finish`` answered)
        as waiting again, so a profile change releases them; one that came since their look
        makes them due now."""
        for outcome, reply in zip(outcomes, replies, strict=True):
            waiting = looked.waiting.get(outcome.delivery_id)
            if waiting is None or reply != "OK" or not outcome.delayed_member:
                continue
            leased, version = waiting
            await address_waits.wait(
                self.redis,
                leased.shard,
                recipient_id=leased.item.recipient_id,
                member=outcome.delayed_member,
                until_ms=leased.item.await_until_ms,
                settings_version=version,
            )


def _has_address(leased: LeasedDelivery) -> bool:
    """Whether a delivery needs no address looked up: it waits for none, or has one."""
    return not leased.item.await_until_ms or bool(leased.item.address)
