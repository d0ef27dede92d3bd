"""Erasing a recipient (``DELETE /v1/recipients/{id}``): its profile, settings and addresses,
wherever Clarion kept them.

In order: the recipient's inbox tokens are revoked (``streams.inbox.revocation``: every
token made until now is refused, and its open realtime streams end); its settings hash goes
from every shard (profile, preferences, quiet hours, dead-address marks), so a notification
accepted from then on is one for an unknown recipient; each delivery still waiting ends
SUPPRESSED ("erased") and its work item, which holds the address, is removed
(``streams.recipients.erase``); one a worker is sending right now is waited for (at most a
lease) and then looked at again, so a retry it schedules is erased too; dead letters of the
recipient are deleted, and its inbox on every shard (the read model's copy goes when the projector
meets ``RecipientErased``); the sandbox's records of calls to its addresses or for its
deliveries (the read model names them) are deleted, and its throttle logs (the ids of the
deliveries counted for it, ``throttle_scopes``). Last, a ``RecipientErased`` event, which
carries no personal data. The read model never held an address (events carry none, error
texts are masked), and the suppression list names addresses by keyed digest only, so both
keep what they have: an address that bounced stays suppressed after its owner was erased.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import structlog
from redis.asyncio import Redis

from app.ingest.profiles import Profile
from app.ingest.profiles import decode as decode_profile
from app.ingest.requests import target_address
from streams.core import clock, codec, scripts
from streams.core.events import RecipientErased
from streams.core.keys import KeySpace, ShardKeys
from streams.delivery.state import read_states
from streams.inbox.revocation import InboxRevocations
from streams.recipients.erase import (
    erase_call,
    find_waiting,
    remove_dead_letters,
    remove_sandbox_records,
)
from streams.recipients.settings import RecipientSettingsStore

log = structlog.get_logger(__name__)

# How often the deliveries being sent are looked at again while the erasure waits for them.
POLL_S = 0.2


@dataclass(slots=True)
class Erasure:
    """What an erasure did."""

    deliveries_ended: int = 0
    work_items_removed: int = 0
    dead_letters_removed: int = 0
    sandbox_records_removed: int = 0
    # The recipient's inbox keys (messages, order, feed) deleted, over every shard.
    inbox_keys_removed: int = 0
    # The recipient's throttle logs deleted (``streams.delivery.throttles``).
    throttle_logs_removed: int = 0
    # Deliveries a worker was still sending when the wait ran out (their attempt ends as
    # attempts end; erasing again removes what they leave).
    still_in_flight: int = 0
    addresses: set[str] = field(default_factory=set)


def profile_addresses(profile: Profile | None) -> set[str]:
    """The delivery addresses a profile holds."""
    if profile is None:
        return set()
    found = {profile.email, profile.phone, profile.webhook_url, *profile.push_tokens}
    found |= {target_address(target) for target in profile.push_targets}
    return {address for address in found if address}


class Eraser:
    """Erases recipients (see the module documentation)."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        *,
        state_retention_ms: int,
        lease_ms: int,
        recipient_deliveries: Callable[[str], Awaitable[list[str]]],
        throttle_scopes: Sequence[str] = (),
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.state_retention_ms = state_retention_ms
        self.lease_ms = lease_ms
        # The read model's delivery ids of a recipient (the sandbox's records name them).
        self.recipient_deliveries = recipient_deliveries
        # The scopes a recipient's throttle logs may have (``app.catalog.throttles``).
        self.throttle_scopes = throttle_scopes

    async def erase(self, recipient_id: str) -> Erasure:
        """Erase the recipient; what was done."""
        done = Erasure()
        # First, so no token reads what is being erased; a token made from now on finds an
        # empty inbox.
        await InboxRevocations(self.redis, self.keys).revoke(recipient_id)
        home = self.keys.home_of_recipient(recipient_id)
        settings = RecipientSettingsStore(self.redis, self.keys)
        stored = await settings.get(recipient_id)
        done.addresses |= profile_addresses(decode_profile(stored.profile))
        await settings.forget(recipient_id)
        delivery_ids: set[str] = set()
        for shard in self.keys.all_shards():
            await self._end_waiting(shard, recipient_id, done, delivery_ids)
            letters = await remove_dead_letters(self.redis, shard, recipient_id)
            done.dead_letters_removed += len(letters)
            done.addresses |= {item.address for item in letters if item.address}
            delivery_ids |= {item.delivery_id for item in letters}
            inbox = shard.inbox(recipient_id)
            done.inbox_keys_removed += await self.redis.delete(
                inbox.messages, inbox.order, inbox.feed
            )
        if self.throttle_scopes:  # one slot: the recipient's hash tag
            logs = [self.keys.throttle(recipient_id, scope) for scope in self.throttle_scopes]
            done.throttle_logs_removed = await self.redis.delete(*logs)
        delivery_ids |= set(await self.recipient_deliveries(recipient_id))
        done.sandbox_records_removed = await remove_sandbox_records(
            self.redis, self.keys, done.addresses, delivery_ids
        )
        event = RecipientErased(
            at=_now(), recipient_id=recipient_id, deliveries_ended=done.deliveries_ended
        )
        await self.redis.xadd(home.events, {codec.EVENT_FIELD: codec.encode_events([event])})
        log.info(
            "recipient.erased",
            deliveries_ended=done.deliveries_ended,
            dead_letters_removed=done.dead_letters_removed,
            still_in_flight=done.still_in_flight,
        )
        return done

    async def _end_waiting(
        self, shard: ShardKeys, recipient_id: str, done: Erasure, delivery_ids: set[str]
    ) -> None:
        """End the recipient's waiting deliveries on ``shard``; wait for those being sent
        (at most a lease and a second) and look again."""
        deadline = time.monotonic() + self.lease_ms / 1000 + 1
        while True:
            waiting = await find_waiting(self.redis, shard, recipient_id)
            done.addresses |= {found.item.address for found in waiting if found.item.address}
            delivery_ids |= {found.item.delivery_id for found in waiting}
            if not waiting:
                return
            ids = [found.item.delivery_id for found in waiting]
            versions = [state.version if state else 1 for state in await read_states(
                self.redis, shard, ids
            )]  # fmt: skip
            now_ms = clock.now_ms()
            call = erase_call(shard, waiting, versions, now_ms, self.state_retention_ms)
            replies = [reply.decode() for reply in await scripts.ERASE(self.redis, *call)]
            done.deliveries_ended += replies.count("ERASED")
            done.work_items_removed += replies.count("ERASED") + replies.count("ENDED")
            left = len(replies) - replies.count("ERASED") - replies.count("ENDED")
            if not left:
                return
            if time.monotonic() >= deadline:
                done.still_in_flight += left
                return
            await asyncio.sleep(POLL_S)


def _now() -> datetime:
    return datetime.now(UTC)
