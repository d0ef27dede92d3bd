"""Escalation steps when they come due: a step whose condition holds is not sent.

A step's work item names the conditions that skip it (``unless``: "read", "delivered") and
the earlier steps' deliveries they look at (``watch``); their states are read for a leased
batch in one round trip. Those states are kept after they end (``held``, by the outcome that
ends them), so a step due hours later still finds them; a state that is gone counts as
neither read nor delivered.

A step taken over from a worker that held it without recording an outcome (its state counts
more than one lease since the last outcome) is not skipped: that worker may have sent it
already, and the step goes again, as any delivery taken over does (at least once), rather
than being recorded SKIPPED when it reached the recipient.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from streams.core.events import StepCondition
from streams.core.vocabulary import CONFIRMED, DeliveryStatus
from streams.delivery.decisions import Skipped
from streams.delivery.leases import LeasedDelivery

_READ = DeliveryStatus.READ.value.encode()
_OWN = "own:"  # the step's own lease count, among the states looked at
_CONFIRMED = frozenset(status.value.encode() for status in CONFIRMED)


async def skipped(redis: Redis, held: Sequence[LeasedDelivery]) -> dict[str, Skipped]:
    """The steps of ``held`` not to send, by delivery id, each with the condition that held
    and the delivery that made it hold."""
    steps = [leased for leased in held if leased.item.unless and leased.item.watch]
    if not steps:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        looked_at: list[str] = []
        for leased in steps:
            pipe.hget(leased.shard.delivery(leased.item.delivery_id), "leases")
            looked_at.append(_OWN + leased.item.delivery_id)
            for watched in leased.item.watch:
                pipe.hget(leased.shard.delivery(watched), "status")
                looked_at.append(watched)
        statuses: dict[str, bytes | None] = dict(zip(looked_at, await pipe.execute(), strict=True))
    decided: dict[str, Skipped] = {}
    for leased in steps:
        item = leased.item
        if int(statuses.get(_OWN + item.delivery_id) or 0) > 1:
            continue  # taken over: the worker before may have sent it, so it goes as it was
        for condition in item.unless:
            wanted = (_READ,) if condition == "read" else _CONFIRMED
            made_it = next((w for w in item.watch if statuses.get(w) in wanted), None)
            if made_it is not None:
                reason: StepCondition = "read" if condition == "read" else "delivered"
                decided[item.delivery_id] = Skipped(reason, because_of=made_it)
                break
    return decided
