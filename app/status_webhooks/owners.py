"""Whose delivery an event is about, and on which channel.

Events about a delivery name neither its producer nor (mostly) its channel. The
``NotificationAccepted`` of the same shard, read earlier, names the producer and the type,
and the ingest events beside it name each delivery's channel; ``Owners`` remembers them as
it reads. Producers are remembered for the last ``limit`` notifications (one small entry
each, the owner objects shared), channels only for producers with a webhook. What was
never seen or is forgotten (a restart, a retry hours later) is looked up: the notification
record in Redis (``ntf:<id>``, kept ``CLARION_IDEMPOTENCY_TTL``), else the read model in
PostgreSQL, which keeps it for the whole retention.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec
import structlog
from redis.asyncio import Redis

from projections.queries import delivery_owners
from streams.core.events import (
    AnyEvent,
    DeliveryDeferred,
    DeliveryExpired,
    DeliveryQueued,
    DeliveryScheduled,
    DeliverySuppressed,
    NotificationAccepted,
)
from streams.core.keys import KeySpace
from streams.core.records import decode_record
from streams.core.vocabulary import Channel

log = structlog.get_logger(__name__)

# Notifications whose producer is remembered; about 150 bytes each.
DEFAULT_LIMIT = 200_000
# A failed connection to PostgreSQL is tried again after this long.
RECONNECT_S = 5.0
# The events that name a delivery's channel when it is accepted (or expires later).
_WITH_CHANNEL = (
    DeliveryQueued, DeliveryScheduled, DeliveryDeferred, DeliverySuppressed, DeliveryExpired
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose a notification is: its producer and type."""

    producer: str
    notification_type: str


class ReadModelOwners:
    """Owners from the read model: the pool made at the first need, again after a failure."""

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Pool]]) -> None:
        self._connect = connect
        self._pool: asyncpg.Pool | None = None
        self._next_try = 0.0

    async def look_up(
        self, delivery_ids: list[str]
    ) -> list[tuple[str, str, Owner, Channel]] | None:
        """(delivery id, notification id, owner, channel) of those projected; None while
        PostgreSQL cannot be reached."""
        try:
            if self._pool is None:
                if time.monotonic() < self._next_try:
                    return None
                self._pool = await self._connect()
            rows = await delivery_owners(self._pool, delivery_ids)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
            self._next_try = time.monotonic() + RECONNECT_S
            log.warning(
                "status_webhooks.read_model_unavailable", error=str(error) or type(error).__name__
            )
            return None
        return [
            (
                row.delivery_id,
                row.notification_id,
                Owner(row.producer, row.notification_type),
                Channel(row.channel),
            )
            for row in rows
        ]

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


class Owners:
    """What ``events`` said about whose each notification is, and the look-ups beyond it."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        read_model: ReadModelOwners | None = None,
        *,
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.read_model = read_model
        self.limit = limit
        self._owners: OrderedDict[str, Owner] = OrderedDict()
        self._channels: OrderedDict[str, Channel] = OrderedDict()
        # One Owner per (producer, type): remembered notifications share them.
        self._shared: dict[tuple[str, str], Owner] = {}

    def learn(self, event: AnyEvent, wanted: Collection[str]) -> None:
        """Remember what ``event`` says about an owner or a channel; channels only of
        ``wanted`` producers' deliveries."""
        if isinstance(event, NotificationAccepted):
            self._remember(event.notification_id, event.producer, event.notification_type)
        elif isinstance(event, _WITH_CHANNEL):
            owner = self._owners.get(event.notification_id)
            if owner is not None and owner.producer in wanted:
                self._remember_channel(event.delivery_id, event.channel)

    def owner(self, notification_id: str) -> Owner | None:
        return self._owners.get(notification_id)

    def channel(self, delivery_id: str) -> Channel | None:
        return self._channels.get(delivery_id)

    async def look_up(self, missing: Sequence[tuple[str, str]]) -> bool:
        """Find the owners and channels of (notification id, delivery id) pairs nobody
        remembered: the notification records in Redis first, then the read model. False when
        some are left and the read model could not be asked (none, or unreachable)."""
        if not missing:
            return True
        # One GET each, not an MGET: on a Redis Cluster, records of other shards are on
        # other nodes.
        async with self.redis.pipeline(transaction=False) as pipe:
            for nid in dict.fromkeys(nid for nid, _ in missing):
                pipe.get(self.keys.notification_shard(nid).notification(nid))
            records: list[Any] = await pipe.execute()
        for raw in records:
            if raw is None:
                continue
            try:
                record = decode_record(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            self._remember(record.id, record.producer, record.type)
            for delivery in record.deliveries:
                self._remember_channel(delivery.id, delivery.channel)
        left = [did for nid, did in missing if nid not in self._owners or did not in self._channels]
        if not left:
            return True
        found = await self.read_model.look_up(left) if self.read_model is not None else None
        for did, nid, owner, channel in found or []:
            self._remember(nid, owner.producer, owner.notification_type)
            self._remember_channel(did, channel)
        return found is not None

    def _remember(self, notification_id: str, producer: str, notification_type: str) -> None:
        shared = self._shared.get((producer, notification_type))
        if shared is None:
            shared = self._shared[(producer, notification_type)] = Owner(
                producer, notification_type
            )
        self._owners[notification_id] = shared
        if len(self._owners) > self.limit:
            self._owners.popitem(last=False)

    def _remember_channel(self, delivery_id: str, channel: Channel) -> None:
        self._channels[delivery_id] = channel
        if len(self._channels) > self.limit:
            self._channels.popitem(last=False)
