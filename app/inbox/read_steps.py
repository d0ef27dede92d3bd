"""What reading an inbox message does to its notification's escalation steps: those that
wait on a read (``unless = "read"`` in the catalog) come due at once, so they end SKIPPED
now rather than when their time comes (``streams.delivery.early_steps``).

It runs after the read is recorded. Should it fail (Redis unreachable), the read stands and
the steps are still skipped, when they come due: a worker looks at the earlier steps'
states then (``app.delivery.steps``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.catalog import Catalog
from streams.core.keys import ShardKeys
from streams.delivery import early_steps
from streams.delivery.cancellations import records_of
from streams.inbox.messages import InboxMessage

log = structlog.get_logger()


class StepsOnRead:
    """Called with the messages a recipient just read (``InboxStore``'s ``on_read``)."""

    def __init__(self, redis: Redis, catalog: Catalog, now_ms: Callable[[], int]) -> None:
        self.redis = redis
        self.now_ms = now_ms
        # Per type with steps: the channels whose step a read skips.
        self.skipped_by_read = {
            name: frozenset(channel for channel, step in steps.items() if "read" in step.unless)
            for name, steps in catalog.steps.items()
        }

    async def __call__(self, shard: ShardKeys, read: Sequence[InboxMessage]) -> int:
        """Bring forward the steps of the notifications of ``read`` that a read skips; how
        many were."""
        nids = list(
            dict.fromkeys(m.notification_id for m in read if self.skipped_by_read.get(m.type))
        )
        if not nids:
            return 0
        try:
            records = await records_of(self.redis, shard, nids)
            now_ms = self.now_ms()
            steps = [
                (delivery.id, delivery.due_ms)
                for record in records
                if record is not None
                for delivery in record.deliveries
                if delivery.reason == "step"
                and delivery.channel in self.skipped_by_read.get(record.type, ())
            ]
            return await early_steps.bring_forward(self.redis, shard, steps, now_ms)
        except RedisError as error:
            log.warning("inbox.steps_not_brought_forward", error=type(error).__name__)
            return 0
