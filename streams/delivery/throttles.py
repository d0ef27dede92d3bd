"""Per-recipient rate caps ("throttles"), counted exactly once per delivery in Redis.

Each recipient has a sliding-window log per throttle scope (``KeySpace.throttle``): the ids
of the deliveries it allowed, scored by when. ``throttle.lua`` allows a delivery already in
the log again (a retry never counts twice), adds one while the window holds fewer than the
limit, and otherwise answers how long until the window's oldest entry leaves it. The clock is
Redis's ``TIME``.

All logs of one recipient share a hash tag, so the requests of a batch go into one script
call per recipient (on a Redis Cluster each lands on its recipient's slot), and the calls of
concurrent tasks share one pipeline (``streams.core.batching``).

``throttled`` is the outcome of a refused delivery (a ``Throttled`` decision): the change
``streams.delivery.outcomes`` makes of a suppression or a deferral, reason ``throttled``, then
a ``DeliveryThrottled`` event as the next version, saying which throttle refused it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime

from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.batching import BatchedScript
from streams.core.events import DeliveryThrottled
from streams.core.keys import KeySpace
from streams.core.scripts import Call, KeyOrArg
from streams.delivery.decisions import Throttled
from streams.delivery.leases import LeasedDelivery
from streams.delivery.outcomes import deferred, suppressed
from streams.delivery.store import Outcome

# (recipient id, scope, limit, window ms, delivery id)
ThrottleRequest = tuple[str, str, int, int, str]


class Throttles:
    """Counts deliveries against recipients' throttles, shared by every worker process."""

    def __init__(self, redis: Redis, keys: KeySpace, *, chunk: int = 128) -> None:
        self._script: BatchedScript[str, ThrottleRequest, int] = BatchedScript(
            redis,
            scripts.THROTTLE,
            group_of=_recipient_of,
            build=lambda recipient, requests: throttle_call(keys, recipient, requests),
            parse=int,
            chunk=chunk,
        )

    async def count(self, requests: Sequence[ThrottleRequest]) -> list[int]:
        """Per request, in order: 0 when its delivery is allowed (counted now, or before),
        else the milliseconds until its window would allow it (nothing was counted)."""
        if not requests:
            return []
        return await self._script.run(requests)


def throttle_call(keys: KeySpace, recipient_id: str, requests: Sequence[ThrottleRequest]) -> Call:
    """The keys and arguments of one ``throttle.lua`` call: one recipient's requests.

    KEYS: the recipient's logs named by the requests, each once. ARGV: per request the number
    of its log in KEYS (from 1), its limit, its window in ms and its delivery id.
    """
    positions: dict[str, int] = {}
    script_keys: list[KeyOrArg] = []
    args: list[KeyOrArg] = []
    for _, scope, limit, window_ms, delivery_id in requests:
        position = positions.get(scope)
        if position is None:
            script_keys.append(keys.throttle(recipient_id, scope))
            position = positions[scope] = len(script_keys)
        args += (position, limit, window_ms, delivery_id)
    return script_keys, args


def _recipient_of(request: ThrottleRequest) -> str:
    return request[0]


def throttled(leased: LeasedDelivery, decision: Throttled, now_ms: int) -> Outcome:
    """The outcome of a delivery its recipient's throttle refused: SUPPRESSED, or SCHEDULED
    until the window allows it, reason ``throttled``; then ``DeliveryThrottled``."""
    item = leased.item
    defer = decision.action == "defer"
    if defer:
        base = deferred(leased, decision.until_ms, now_ms, "throttled")
    else:
        base = suppressed(leased, now_ms, "throttled")
    # The change's events (a scheduled delivery's ``DeliveryDue`` first), then this one.
    changes = codec.decode_events(base.events)
    version = leased.lease.version + len(changes) + 1
    detail = DeliveryThrottled(
        at=_at(now_ms),
        notification_id=item.notification_id,
        delivery_id=item.delivery_id,
        version=version,
        channel=item.channel,
        notification_type=item.notification_type,
        action=decision.action,
        limit=decision.limit,
        per_seconds=decision.per_seconds,
        scope=decision.scope,
        until=_at(decision.until_ms) if defer else None,
    )
    events = codec.encode_events([*changes, detail])
    return dataclasses.replace(base, events=events, fields={**base.fields, "version": version})


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)
