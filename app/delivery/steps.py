"""Escalation steps when they come due: a step whose condition holds is not sent.

A step's work item names the conditions that skip it (``unless``: "read", "delivered") and
the earlier steps' deliveries they look at (``watch``); their states are read for a leased
batch in one round trip. Those states are kept after they end (``held``, by the outcome that
ends them), so a step due hours later still finds them; a state that is gone counts as
neither read nor delivered.

A step taken over from a worker that held it without recording an outcome (its state counts
more than one lease since the last outcome) may have been sent by that worker, so it goes
again, as any delivery taken over does (at least once), rather than being recorded SKIPPED
when it reached the recipient. But not when the message was read before the step was
queued (its work entry's time; the read time is the inbox message's): every worker that
held it looked after the read and could only have skipped it. A step a read brought forward
is queued after the read, so a read followed by a worker's crash never sends one.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from streams.core.events import StepCondition
from streams.core.vocabulary import CONFIRMED, DeliveryStatus
from streams.delivery.decisions import Skipped
from streams.delivery.leases import LeasedDelivery
from streams.delivery.work_items import WorkItem
from streams.inbox.messages import MessageState

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
    taken_over: list[tuple[LeasedDelivery, Skipped]] = []
    for leased in steps:
        found = _holds(leased.item, statuses)
        if found is None:
            continue
        if int(statuses.get(_OWN + leased.item.delivery_id) or 0) > 1:
            if found.reason == "read":  # the worker before may have sent it: see above
                taken_over.append((leased, found))
            continue
        decided[leased.item.delivery_id] = found
    if taken_over:
        decided.update(await _read_before_queued(redis, taken_over))
    return decided


def _holds(item: WorkItem, statuses: dict[str, bytes | None]) -> Skipped | None:
    """The first of the step's conditions that holds, and the delivery that made it hold."""
    for condition in item.unless:
        wanted = (_READ,) if condition == "read" else _CONFIRMED
        made_it = next((w for w in item.watch if statuses.get(w) in wanted), None)
        if made_it is not None:
            reason: StepCondition = "read" if condition == "read" else "delivered"
            return Skipped(reason, because_of=made_it)
    return None


async def _read_before_queued(
    redis: Redis, taken_over: list[tuple[LeasedDelivery, Skipped]]
) -> dict[str, Skipped]:
    """The steps taken over whose message was read before they were queued."""
    async with redis.pipeline(transaction=False) as pipe:
        for leased, found in taken_over:
            messages = leased.shard.inbox(leased.item.recipient_id).messages
            pipe.hget(messages, f"f:{found.because_of}")
        states: list[bytes | None] = await pipe.execute()
    decided: dict[str, Skipped] = {}
    for (leased, found), state in zip(taken_over, states, strict=True):
        read_ms = MessageState.parse(state).read_ms if state else 0
        if 0 < read_ms < int(leased.entry_id.split("-", 1)[0]):
            decided[leased.item.delivery_id] = found
    return decided
