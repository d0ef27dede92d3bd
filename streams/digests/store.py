"""A digest's life in Redis, on its recipient's home shard.

A notification of a digest type joins the digest open for its (recipient, type, key), or
opens one whose id is derived from (recipient, type, key, the time it opened): ``join_many``
(a batch's notifications in three round trips), ``join``. A digest is due when its window
ends, at its daily time, or at once when it is full; a closer (``app.digests``) ``take``s due
digests (claimed for ``CLAIM_MS``: another closer does not take them meanwhile, and they
come due again if it dies), seals them (no notification joins one after that: the next
opens a new one) and reads their items (``seal_many``), makes each one's notification with
the digest id as the idempotency key and then ``close_many``s them. A close repeated after
a crash, or by two closers at once, makes the same notification once and records the
digest closed once; a notification cancelled while its digest is open ``leave``s it.

Each join is recorded by an event on the shard's stream (``NotificationDigested``) after
the script that made it: a join is answered (202) only once its event is written, and a
producer's retry of the same request joins nothing twice. A close's ``DigestClosed`` is
written by the script that closes it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
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
# How long a closer's claim on the digests it took lasts: they come due again after it.
CLAIM_MS = 30_000


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
    again: bool = True  # its request was answered before: it may have joined already


# How a notification asks to join (``join.lua``): the digest it names was found open, or is a
# new one (none was open); or its request was answered before, so it may have joined.
OPEN, NEW, AGAIN = "open", "new", "again"
# One notification's part of a ``join.lua`` call: its ask, the digest it names, how it asks,
# and its open digest's key.
JoinCandidate = tuple[JoinAsk, str, str, str]


class Joined(msgspec.Struct, frozen=True):
    digest_id: str
    count: int
    closes_ms: int


@dataclass(frozen=True, slots=True)
class Sealed:
    """A due digest, sealed: what its notification is made of."""

    digest_id: str
    member: str  # its member of the shard's due set: "<id> <open key>"
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
    open_key = _open_key(shard, ask)
    current = _open_id(await redis.get(open_key))
    for _ in range(MAX_TRIES):
        candidate = current or digest_id(ask.recipient_id, ask.notification_type, ask.key, now_ms)
        how = AGAIN if ask.again else (OPEN if current else NEW)
        call = digest_join_call(shard, [(ask, candidate, how, open_key)], now_ms)
        [reply] = await scripts.DIGEST_JOIN(redis, *call)
        if reply[0] == b"JOINED":
            joined = Joined(as_text(reply[1]), int(reply[2]), int(reply[3]))
            await _record_join(redis, shard, ask, joined, now_ms)
            return joined
        current = as_text(reply[1])
        now_ms += 1  # a new candidate, should one be opened in the same millisecond
    raise DigestBusy("digest: it kept changing while joining; retry the request")


def digest_join_call(shard: ShardKeys, joins: Sequence[JoinCandidate], now_ms: int) -> Call:
    """The keys and arguments of a ``join.lua`` call joining ``joins`` in order (its header
    says what they are)."""
    keys: list[KeyOrArg] = [shard.digests_due]
    args: list[KeyOrArg] = [now_ms, MAX_BYTES, KEEP_MS]
    for ask, candidate, how, open_key in joins:
        keys += (
            open_key or _open_key(shard, ask), shard.digest(candidate),
            shard.digest_items(candidate), shard.digest_joined(ask.notification_id),
        )  # fmt: skip
        args += (
            candidate, how, max(ask.closes_ms, now_ms), ask.max_items, ask.notification_id,
            ask.item, ask.recipient,
        )  # fmt: skip
        if how == OPEN:  # the digest's own fields are written only by the join that opens it
            args += ("", "", "", "", "")
        else:
            args += (ask.recipient_id, ask.notification_type, ask.key, ask.producer, ask.locale)
    return keys, args


async def join_many(
    redis: Redis, asks: Sequence[tuple[ShardKeys, JoinAsk]], now_ms: int
) -> list[Joined | DigestBusy]:
    """Join each (home shard, ask) and record the joins, in order, in three round trips of
    one command per shard each: the open digests read (MGET), the joins made (one
    ``join.lua`` call), their events written (XADD). An ask sent back (a digest opened or
    sealed meanwhile) is asked again alone, as ``join`` does."""
    by_shard: dict[int, tuple[ShardKeys, list[int]]] = {}
    for index, (shard, _) in enumerate(asks):
        by_shard.setdefault(shard.shard, (shard, []))[1].append(index)
    groups = list(by_shard.values())
    open_keys = {
        shard.shard: [_open_key(shard, asks[i][1]) for i in indices] for shard, indices in groups
    }
    async with redis.pipeline(transaction=False) as pipe:
        for shard, _ in groups:
            # By name: redis-py's Redis Cluster pipeline refuses its mget method (keys may be
            # in several slots); a shard's keys share its slot, by which the call is routed.
            pipe.execute_command("MGET", *open_keys[shard.shard])
        found: list[list[bytes | None]] = await pipe.execute()
    calls: list[Call] = []
    for (shard, indices), opened in zip(groups, found, strict=True):
        joins: list[JoinCandidate] = []
        for index, raw, open_key in zip(indices, opened, open_keys[shard.shard], strict=True):
            ask = asks[index][1]
            current = _open_id(raw)
            how = AGAIN if ask.again else (OPEN if current else NEW)
            candidate = current or digest_id(
                ask.recipient_id, ask.notification_type, ask.key, now_ms
            )
            joins.append((ask, candidate, how, open_key))
        calls.append(digest_join_call(shard, joins, now_ms))
    replies: list[Any] = [None] * len(asks)
    for (_, indices), group in zip(
        groups, await scripts.DIGEST_JOIN.run_many(redis, calls), strict=True
    ):
        for index, reply in zip(indices, group, strict=True):
            replies[index] = reply
    return await _joined(redis, asks, replies, now_ms)


async def _joined(
    redis: Redis, asks: Sequence[tuple[ShardKeys, JoinAsk]], replies: list[Any], now_ms: int
) -> list[Joined | DigestBusy]:
    """The joins ``replies`` made, their events written (one entry per shard), and the asks
    sent back asked again alone."""
    results: list[Joined | DigestBusy | None] = []
    events: dict[str, list[NotificationDigested]] = {}
    for (shard, ask), reply in zip(asks, replies, strict=True):
        if reply[0] != b"JOINED":
            results.append(None)
            continue
        joined = Joined(as_text(reply[1]), int(reply[2]), int(reply[3]))
        events.setdefault(shard.events, []).append(_join_event(ask, joined, now_ms))
        results.append(joined)
    async with redis.pipeline(transaction=False) as pipe:
        for stream, recorded in events.items():
            pipe.xadd(stream, {"e": codec.encode_events(recorded)})
        await pipe.execute()
    return [
        result if result is not None else await _join_alone(redis, *asks[index], now_ms)
        for index, result in enumerate(results)
    ]


async def _join_alone(
    redis: Redis, shard: ShardKeys, ask: JoinAsk, now_ms: int
) -> Joined | DigestBusy:
    try:
        return await join(redis, shard, ask, now_ms)
    except DigestBusy as busy:
        return busy


def _open_id(value: bytes | str | None) -> str:
    """The id in an open digest's value ("<id> <closes ms>"; "" for none)."""
    return as_text(value).partition(" ")[0] if value else ""


def _open_key(shard: ShardKeys, ask: JoinAsk) -> str:
    return shard.digest_open(ask.recipient_id, ask.notification_type, key_digest(ask.key))


def _join_event(ask: JoinAsk, joined: Joined, now_ms: int) -> NotificationDigested:
    return NotificationDigested(
        at=_at(now_ms), notification_id=ask.notification_id, digest_id=joined.digest_id,
        recipient_id=ask.recipient_id, notification_type=ask.notification_type,
        count=joined.count, closes_at=_at(joined.closes_ms),
    )  # fmt: skip


async def _record_join(
    redis: Redis, shard: ShardKeys, ask: JoinAsk, joined: Joined, now_ms: int
) -> None:
    event = _join_event(ask, joined, now_ms)
    await redis.xadd(shard.events, {"e": codec.encode_events([event])})


async def due(redis: Redis, shard: ShardKeys, now_ms: int, limit: int = 100) -> list[str]:
    """The ids of ``shard``'s digests due by ``now_ms``, the most overdue first."""
    found: list[bytes] = await redis.zrangebyscore(  # type: ignore[assignment]
        shard.digests_due, "-inf", now_ms, start=0, num=limit
    )
    return [digest_of(as_text(member)) for member in found]


def digest_of(member: str) -> str:
    """The digest id of a member of the due set ("<id> <open key>")."""
    return member.partition(" ")[0]


async def take(
    redis: Redis, shard: ShardKeys, now_ms: int, limit: int = 100, claim_ms: int = CLAIM_MS
) -> list[str]:
    """Claim up to ``limit`` of ``shard``'s digests due by ``now_ms`` for ``claim_ms``: their
    members of the due set ("<id> <open key>"), the most overdue first."""
    taken = await scripts.DIGEST_TAKE(redis, *digest_take_call(shard, now_ms, limit, claim_ms))
    return [as_text(raw) for raw in taken]


async def release(redis: Redis, shard: ShardKeys, members: Sequence[str], now_ms: int) -> None:
    """Give up the claim on taken digests not closed (by their members): due again at
    ``now_ms``."""
    await redis.zadd(shard.digests_due, dict.fromkeys(members, now_ms), xx=True)


async def member_of(redis: Redis, shard: ShardKeys, digest: str) -> str:
    """A digest's member of the due set, made from its fields ("": it is gone)."""
    recipient_id, type_name, key = await redis.hmget(
        shard.digest(digest), ["recipient_id", "type", "key"]
    )
    if recipient_id is None or type_name is None:
        return ""
    open_key = shard.digest_open(
        as_text(recipient_id), as_text(type_name), key_digest(as_text(key or b""))
    )
    return f"{digest} {open_key}"


async def seal(redis: Redis, shard: ShardKeys, digest: str) -> Sealed | None:
    """``seal_many`` of one digest, by its id."""
    member = await member_of(redis, shard, digest)
    return (await seal_many(redis, shard, [member]))[0] if member else None


async def seal_many(redis: Redis, shard: ShardKeys, members: Sequence[str]) -> list[Sealed | None]:
    """Seal taken digests (by their members of the due set) and read what their
    notifications are made of, in one round trip; None for one that is gone or closed
    already (taken off the due set then)."""
    if not members:
        return []
    replies = await scripts.DIGEST_SEAL(redis, *digest_seal_call(shard, members))
    return [
        _sealed(member, _pairs(reply[1]), reply[2]) if reply[0] == b"sealed" else None
        for member, reply in zip(members, replies, strict=True)
    ]


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    """A hash's fields from HGETALL's reply inside a script (field, value, ...)."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _sealed(member: str, fields: dict[bytes, bytes], entries: list[bytes]) -> Sealed:
    """What a sealed digest's notification is made of; ``entries``: its items list."""
    items: dict[bytes, bytes] = {}  # by notification id, in the order they joined
    for entry in entries:
        nid, _, item = entry.partition(b" ")
        items.setdefault(nid, item)
    return Sealed(
        digest_id=digest_of(member),
        member=member,
        recipient_id=as_text(fields[b"recipient_id"]),
        notification_type=as_text(fields[b"type"]),
        key=as_text(fields.get(b"key", b"")),
        producer=as_text(fields[b"producer"]),
        locale=as_text(fields.get(b"locale", b"")),
        recipient=fields.get(b"recipient", b"{}"),
        items=list(items.values()),
    )


async def close(
    redis: Redis, shard: ShardKeys, sealed: Sealed, notification_id: str, now_ms: int
) -> bool:
    """``close_many`` of one digest."""
    return (await close_many(redis, shard, [(sealed, notification_id)], now_ms))[0]


async def close_many(
    redis: Redis, shard: ShardKeys, closes: Sequence[tuple[Sealed, str]], now_ms: int
) -> list[bool]:
    """Record sealed digests closed, each with the notification made of it (""  for none:
    every item left it) and its event, in one round trip; whether each call closed it
    (False: closed before, by this closer's earlier try or another's)."""
    if not closes:
        return []
    done = await scripts.DIGEST_CLOSE(redis, *digest_close_call(shard, closes, now_ms))
    return [bool(closed) for closed in done]


async def leave(redis: Redis, shard: ShardKeys, digest: str, notification_id: str) -> str:
    """Take a cancelled notification out of its digest while the digest is open: "LEFT", or
    the digest's state ("sealed", "closed") or "GONE" when too late or not there."""
    call = digest_leave_call(shard, digest, notification_id)
    return as_text(await scripts.DIGEST_LEAVE(redis, *call))


def digest_take_call(shard: ShardKeys, now_ms: int, limit: int, claim_ms: int) -> Call:
    """The keys and arguments of one ``take.lua`` call."""
    return [shard.digests_due], [now_ms, limit, claim_ms]


def digest_close_call(shard: ShardKeys, closes: Sequence[tuple[Sealed, str]], now_ms: int) -> Call:
    """The keys and arguments of a ``close.lua`` call closing ``closes`` (each sealed digest
    and the notification made of it; its header says what they are)."""
    keys: list[KeyOrArg] = [shard.digests_due, shard.events]
    args: list[KeyOrArg] = [now_ms, KEEP_MS]
    at = _at(now_ms)
    for sealed, notification_id in closes:
        event = DigestClosed(
            at=at, digest_id=sealed.digest_id, recipient_id=sealed.recipient_id,
            notification_type=sealed.notification_type, count=len(sealed.items),
            notification_id=notification_id,
        )  # fmt: skip
        keys += (shard.digest(sealed.digest_id), shard.digest_items(sealed.digest_id))
        args += (sealed.member, notification_id, codec.encode_events([event]))
    return keys, args


def digest_seal_call(shard: ShardKeys, members: Sequence[str]) -> Call:
    """The keys and arguments of a ``seal.lua`` call sealing the digests of ``members``."""
    keys: list[KeyOrArg] = [shard.digests_due]
    for member in members:
        digest, _, open_key = member.partition(" ")
        keys += (shard.digest(digest), shard.digest_items(digest), open_key)
    return keys, list(members)


def digest_leave_call(shard: ShardKeys, digest: str, notification_id: str) -> Call:
    """The keys and arguments of one ``leave.lua`` call."""
    return [shard.digest(digest), shard.digest_items(digest)], [notification_id]


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)
