"""A digest's life in Redis, on its recipient's home shard.

A notification of a digest type joins the digest open for its (recipient, type, key), or
opens one whose id is derived from (recipient, type, key, the time it opened): ``join``. A
digest is due when its window ends, at its daily time, or at once when it is full; the
closer (``app.digests``) seals it (no notification joins it after that: the next opens a
new one), reads its items, makes its notification with the digest id as the idempotency key
and then ``close``s it. A close repeated after a crash makes the same notification once; a
notification cancelled while its digest is open ``leave``s it.

Each join and close is recorded by an event on the shard's stream (``NotificationDigested``,
``DigestClosed``) after the script that made it: a join is answered (202) only once its
event is written, and a producer's retry of the same request joins nothing twice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.codec import as_text
from streams.core.errors import Conflict
from streams.core.events import DigestClosed, NotificationDigested
from streams.core.keys import ShardKeys
from streams.core.scripts import Call, KeyOrArg

# The most a digest holds, in bytes of its items' data: it is due at once when it reaches it.
MAX_BYTES = 1 << 20
# How long a closed digest, and which digest each notification joined, are kept.
KEEP_MS = 86_400_000
# Joins asked again (another notification opened or sealed the digest meanwhile) at most.
MAX_TRIES = 5


class JoinAsk(msgspec.Struct, frozen=True, kw_only=True):
    """One accepted notification to join its digest."""

    notification_id: str
    recipient_id: str
    notification_type: str
    key: str
    producer: str
    locale: str
    recipient: bytes  # the request's recipient (JSON): the digest's notification's addresses
    item: bytes  # the notification's data (JSON)
    closes_ms: int  # when a digest it opens closes
    max_items: int


class Joined(msgspec.Struct, frozen=True):
    digest_id: str
    count: int
    closes_ms: int


@dataclass(frozen=True, slots=True)
class Sealed:
    """A due digest, sealed: what its notification is made of."""

    digest_id: str
    recipient_id: str
    notification_type: str
    key: str
    producer: str
    locale: str
    recipient: bytes
    items: list[bytes]  # each joined notification's data (JSON), oldest first


class DigestBusy(Conflict):
    """Digests kept opening and closing under a join (retry the request)."""


def digest_id(recipient_id: str, notification_type: str, key: str, opened_ms: int) -> str:
    """The id of the digest (recipient, type, key) opened at ``opened_ms``."""
    text = "\x00".join((recipient_id, notification_type, key, str(opened_ms)))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def key_digest(key: str) -> str:
    """A digest key as it goes into a key name: bounded, whatever the data made it."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


async def join(redis: Redis, shard: ShardKeys, ask: JoinAsk, now_ms: int) -> Joined:
    """Join ``ask``'s notification to its digest on ``shard`` (its recipient's home) and
    record it; raises ``DigestBusy``."""
    open_key = shard.digest_open(ask.recipient_id, ask.notification_type, key_digest(ask.key))
    found = await redis.get(open_key)
    current = as_text(found) if found else ""
    for _ in range(MAX_TRIES):
        candidate = current or digest_id(ask.recipient_id, ask.notification_type, ask.key, now_ms)
        reply = await scripts.DIGEST_JOIN(
            redis, *digest_join_call(shard, ask, candidate, found_open=bool(current), now_ms=now_ms)
        )
        if reply[0] == b"JOINED":
            joined = Joined(as_text(reply[1]), int(reply[2]), int(reply[3]))
            await _record_join(redis, shard, ask, joined, now_ms)
            return joined
        current = as_text(reply[1])
        now_ms += 1  # a new candidate, should one be opened in the same millisecond
    raise DigestBusy("digest: it kept changing while joining; retry the request")


def digest_join_call(
    shard: ShardKeys, ask: JoinAsk, candidate: str, *, found_open: bool, now_ms: int
) -> Call:
    """The keys and arguments of one ``join.lua`` call (its header says what they are)."""
    open_key = shard.digest_open(ask.recipient_id, ask.notification_type, key_digest(ask.key))
    keys: list[KeyOrArg] = [
        open_key, shard.digest(candidate), shard.digest_items(candidate),
        shard.digest_order(candidate), shard.digests_due, shard.digest_joined(ask.notification_id),
    ]  # fmt: skip
    args: list[KeyOrArg] = [
        candidate, "1" if found_open else "0", now_ms, max(ask.closes_ms, now_ms),
        ask.max_items, MAX_BYTES, KEEP_MS, ask.notification_id, ask.item, ask.recipient_id,
        ask.notification_type, ask.key, ask.producer, ask.locale, ask.recipient,
    ]  # fmt: skip
    return keys, args


async def _record_join(
    redis: Redis, shard: ShardKeys, ask: JoinAsk, joined: Joined, now_ms: int
) -> None:
    event = NotificationDigested(
        at=_at(now_ms), notification_id=ask.notification_id, digest_id=joined.digest_id,
        recipient_id=ask.recipient_id, notification_type=ask.notification_type,
        count=joined.count, closes_at=_at(joined.closes_ms),
    )  # fmt: skip
    await redis.xadd(shard.events, {"e": codec.encode_events([event])})


async def due(redis: Redis, shard: ShardKeys, now_ms: int, limit: int = 100) -> list[str]:
    """The ids of ``shard``'s digests due by ``now_ms``, the most overdue first."""
    found: list[bytes] = await redis.zrangebyscore(  # type: ignore[assignment]
        shard.digests_due, "-inf", now_ms, start=0, num=limit
    )
    return [as_text(raw) for raw in found]


async def seal(redis: Redis, shard: ShardKeys, digest: str) -> Sealed | None:
    """Seal a due digest and read what its notification is made of; None when it is gone
    (taken off the due set then)."""
    fields: dict[Any, Any] = await redis.hgetall(shard.digest(digest))
    if not fields:
        await redis.zrem(shard.digests_due, digest)
        return None
    open_key = as_text(fields.get(b"open_key", b""))
    await scripts.DIGEST_SEAL(redis, *digest_seal_call(shard, digest, open_key))
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lrange(shard.digest_order(digest), 0, -1)
        pipe.hgetall(shard.digest_items(digest))
        order, items = await pipe.execute()
    return Sealed(
        digest_id=digest,
        recipient_id=as_text(fields[b"recipient_id"]),
        notification_type=as_text(fields[b"type"]),
        key=as_text(fields.get(b"key", b"")),
        producer=as_text(fields[b"producer"]),
        locale=as_text(fields.get(b"locale", b"")),
        recipient=fields.get(b"recipient", b"{}"),
        items=[items[nid] for nid in dict.fromkeys(order) if nid in items],
    )


async def close(
    redis: Redis, shard: ShardKeys, sealed: Sealed, notification_id: str, now_ms: int
) -> None:
    """Record a sealed digest closed, its notification made (``notification_id``; "" for
    none: every item left it), in one transaction with its event."""
    digest = sealed.digest_id
    event = DigestClosed(
        at=_at(now_ms), digest_id=digest, recipient_id=sealed.recipient_id,
        notification_type=sealed.notification_type, count=len(sealed.items),
        notification_id=notification_id,
    )  # fmt: skip
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(shard.digest(digest), mapping={
            "state": "closed", "notification_id": notification_id, "closed_ms": now_ms,
        })  # fmt: skip
        pipe.zrem(shard.digests_due, digest)
        for key in (shard.digest(digest), shard.digest_items(digest), shard.digest_order(digest)):
            pipe.pexpire(key, KEEP_MS)
        pipe.xadd(shard.events, {"e": codec.encode_events([event])})
        await pipe.execute()


async def leave(redis: Redis, shard: ShardKeys, digest: str, notification_id: str) -> str:
    """Take a cancelled notification out of its digest while the digest is open: "LEFT", or
    the digest's state ("sealed", "closed") or "GONE" when too late or not there."""
    call = digest_leave_call(shard, digest, notification_id)
    return as_text(await scripts.DIGEST_LEAVE(redis, *call))


def digest_seal_call(shard: ShardKeys, digest: str, open_key: str) -> Call:
    """The keys and arguments of one ``seal.lua`` call."""
    return [shard.digest(digest), open_key], [digest]


def digest_leave_call(shard: ShardKeys, digest: str, notification_id: str) -> Call:
    """The keys and arguments of one ``leave.lua`` call."""
    keys: list[KeyOrArg] = [
        shard.digest(digest), shard.digest_items(digest), shard.digest_order(digest)
    ]  # fmt: skip
    return keys, [notification_id]


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)
