"""Cancelling a producer's notifications: every delivery not handed to a provider yet ends
CANCELLED, atomically with the workers (``streams/delivery/cancel.lua``).

A notification is found by its record in Redis (``ntf:<id>``), kept as long as its
idempotency key; after that (a notification sent days ahead, say), by the read model, which
lists its deliveries: those it has not seen end are cancelled like any other. A
delivery whose state hash is absent is "as accepted", unless it ended and the projector
released its state since (``streams.delivery.state_release``, at the earliest
``CLARION_PROJECTED_STATE_RETENTION`` after it was projected): for a notification that old,
the read model is asked first, and without it the cancellation is refused (503) rather than
a delivery long sent reported as cancelled. A notification whose record is gone (its key
expired, it was not sent later) has nothing left to cancel: the read model says how its
deliveries ended.

A notification that joined a digest (its deliveries DIGESTED) leaves the digest while the
digest is open, and its deliveries end CANCELLED; once the digest is sealed it is part of the
digest's notification and stays DIGESTED (cancel that one instead).

A cancellation key's index (``cancel:<producer>:<key>``) keeps each notification until it
expires, so a key reaches one whose record is gone the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

import asyncpg
import msgspec
from redis.asyncio import Redis

from projections import queries
from projections.database import UNAVAILABLE
from streams.campaigns.ids import campaign_of
from streams.core.keys import KeySpace, ShardKeys
from streams.core.records import DeliveryAtAcceptance, NotificationRecord
from streams.core.vocabulary import PROVIDER_ACCEPTED, TERMINAL, DeliveryStatus
from streams.delivery import cancellations
from streams.delivery.cancellations import CancelledNotification
from streams.delivery.state import read_states
from streams.digests import store as digests

# The longest a delivery may still wait: the longest horizon and the longest TTL after it.
_LONGEST_WAIT_MS = 60 * 86_400_000


class ReadModelNeeded(Exception):
    """The read model must say how old deliveries ended, and cannot be reached."""


class KeyCancellation(msgspec.Struct, frozen=True):
    """What a cancellation by key did: the notifications found under the key, and their
    deliveries by what became of them."""

    key: str
    notifications: int
    cancelled: int
    # Already with a provider (SENT, DELIVERED, READ): these went before the cancellation.
    sent: int
    # A worker was calling the provider at that moment: it may go; a retry of it will not.
    sending: int
    # Ended otherwise before (suppressed, expired, failed).
    ended: int


class Cancellations:
    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        read_model: Callable[[], Awaitable[asyncpg.Pool | None]],
        *,
        state_retention_ms: int,
        released_after_ms: int,
        clock: Callable[[], datetime],
        parked_after_ms: int = cancellations.NEVER_PARKED,
    ) -> None:
        self.redis = redis
        self.keys = keys
        # The read model's pool, None while PostgreSQL cannot be reached.
        self.read_model = read_model
        self.state_retention_ms = state_retention_ms
        # A notification younger than this has no state released yet.
        self.released_after_ms = released_after_ms
        self.clock = clock
        # How far ahead a waiting work item may be parked in PostgreSQL.
        self.parked_after_ms = parked_after_ms

    async def cancel_notification(
        self, producer: str, notification_id: str
    ) -> CancelledNotification | None:
        """Cancel one of ``producer``'s notifications; None when it has none of that id.
        Raises ``ReadModelNeeded``."""
        shard = self.keys.notification_shard(notification_id)
        [record] = await cancellations.records_of(self.redis, shard, [notification_id])
        if record is None:
            return await self._from_read_model(producer, notification_id)
        if record.producer != producer:
            return None
        [done] = await self._cancel(shard, [record], by=producer)
        return done

    async def cancel_key(self, producer: str, key: str) -> KeyCancellation:
        """Cancel every notification ``producer`` sent with cancellation key ``key`` that is
        still in Redis; raises ``ReadModelNeeded``."""
        found: list[CancelledNotification] = []
        for shard in self.keys.all_shards():
            ids = await cancellations.indexed(self.redis, shard, producer, key, self._now_ms())
            records = await cancellations.records_of(self.redis, shard, ids)
            found += await self._cancel(
                shard, [r for r in records if r is not None and r.producer == producer],
                by=producer, key=key,
            )  # fmt: skip
            for nid, record in zip(ids, records, strict=True):
                if record is None:  # its key expired: the read model lists its deliveries
                    old = await self._from_read_model(producer, nid, key=key)
                    found += [old] if old is not None else []
            await cancellations.forget(self.redis, shard, producer, key, ids)
        return _summary(key, found)

    async def _cancel(
        self, shard: ShardKeys, records: Sequence[NotificationRecord], *, by: str, key: str = ""
    ) -> list[CancelledNotification]:
        if not records:
            return []
        # Asked before leaving: a notification that left its digest is pending again, and
        # the read model (which has it DIGESTED) must not be taken for its end.
        projected = await self._projected(shard, records)
        records = [await self._leave_digest(record) for record in records]
        return await cancellations.cancel(
            self.redis, shard, records, by=by, key=key, projected=projected,
            retention_ms=self.state_retention_ms, now=self.clock(),
            parked_after_ms=self.parked_after_ms,
        )  # fmt: skip

    async def _projected(
        self, shard: ShardKeys, records: Sequence[NotificationRecord]
    ) -> dict[str, str]:
        """What the read model says of the deliveries whose state may have been released:
        of notifications old enough, those pending at acceptance without a state now."""
        oldest = self._now_ms() - self.released_after_ms
        candidates = [
            delivery.id
            for record in records
            if record.created_ms <= oldest
            for delivery in record.deliveries
            if delivery.status not in TERMINAL
        ]
        if not candidates:
            return {}
        states = await read_states(self.redis, shard, candidates)
        absent = [did for did, state in zip(candidates, states, strict=True) if state is None]
        if not absent:
            return {}
        pool = await self.read_model()
        if pool is None:
            raise ReadModelNeeded
        try:
            return await queries.delivery_statuses(pool, absent)
        except UNAVAILABLE:
            raise ReadModelNeeded from None

    async def _leave_digest(self, record: NotificationRecord) -> NotificationRecord:
        """A notification that joined a digest leaves it while the digest is open; its
        deliveries (DIGESTED) are then cancelled like any waiting one. Once its digest is
        sealed it is part of the digest's notification, and stays DIGESTED."""
        digested = DeliveryStatus.DIGESTED
        if not record.deliveries or any(d.status != digested for d in record.deliveries):
            return record
        home = self.keys.home_of_recipient(record.recipient_id)
        digest = record.digest_id or await digests.joined_digest(self.redis, home, record.id)
        if not digest:
            return record
        if await digests.leave(self.redis, home, digest, record.id) != "LEFT":
            return record
        waiting = DeliveryStatus.SCHEDULED  # as cancel.lua sees it: not ended, not queued
        return msgspec.structs.replace(record, deliveries=[
            msgspec.structs.replace(delivery, status=waiting) for delivery in record.deliveries
        ])  # fmt: skip

    def _now_ms(self) -> int:
        return int(self.clock().timestamp() * 1000)

    async def _from_read_model(
        self, producer: str, notification_id: str, *, key: str = ""
    ) -> CancelledNotification | None:
        """A notification whose record left Redis with its idempotency key: the read model
        lists its deliveries; those it has not seen end are cancelled like any other, and one
        in a digest still open leaves it (the read model names the digest) as with a record."""
        pool = await self.read_model()
        if pool is None:
            raise ReadModelNeeded
        try:
            row = await queries.notification_status(pool, notification_id)
        except UNAVAILABLE:
            raise ReadModelNeeded from None
        if row is None or row.producer != producer:
            return None
        # Its expiry is not in the row: a work item of it lives no longer than the longest
        # TTL after the longest horizon, which bounds how long a CANCELLED state is held.
        record = NotificationRecord(
            id=row.id, type=row.type, priority=row.priority, recipient_id=row.recipient_id,
            producer=row.producer, created_ms=int(row.created_at.timestamp() * 1000),
            expires_ms=self._now_ms() + _LONGEST_WAIT_MS,
            deliveries=[
                DeliveryAtAcceptance(id=d.id, channel=d.channel, status=d.status)
                for d in row.deliveries
                if d.channel is not None
            ],
            campaign_id=campaign_of(row.idempotency_key), digest_id=row.digest_id or "",
        )  # fmt: skip
        shard = self.keys.notification_shard(notification_id)
        projected = {d.id: d.status for d in row.deliveries}
        left = await self._leave_digest(record)
        if left is not record:  # pending again: the read model's DIGESTED is not their end
            projected = {did: s for did, s in projected.items() if s != DeliveryStatus.DIGESTED}
            record = left
        [done] = await cancellations.cancel(
            self.redis, shard, [record], by=producer, key=key, projected=projected,
            retention_ms=self.state_retention_ms, now=self.clock(),
            parked_after_ms=self.parked_after_ms,
        )  # fmt: skip
        return done


def _summary(key: str, found: list[CancelledNotification]) -> KeyCancellation:
    counts = {"cancelled": 0, "sent": 0, "sending": 0, "ended": 0}
    for notification in found:
        for delivery in notification.deliveries:
            status = delivery.status
            if status == DeliveryStatus.CANCELLED:
                counts["cancelled"] += 1
            elif status in PROVIDER_ACCEPTED:
                counts["sent"] += 1
            elif status == DeliveryStatus.SENDING:
                counts["sending"] += 1
            else:
                counts["ended"] += 1
    return KeyCancellation(key=key, notifications=len(found), **counts)
