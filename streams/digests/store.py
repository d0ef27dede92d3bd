"""Joining digests in Redis, on the recipient's home shard (``streams.digests.closing``
closes them).

A notification of a digest type joins the digest open for its (recipient, type, key), or
opens one whose id is derived from (recipient, type, key, the time it opened). One ingested
on its recipient's home shard joins in the ingest script's own step (``DigestJoin``, laid out
by ``add_join``); the others, and a request answered again, join after: ``join_many`` (a
batch's notifications in two round trips when the process saw their digests open,
``OpenDigests``), ``join``. A notification cancelled while its digest is open ``leave``s it.

Each join is recorded by an event on the shard's stream (``NotificationDigested``) after
the script that made it: a join is answered (202) only once its event is written, and a
producer's retry of the same request joins nothing twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec
from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.codec import as_text
from streams.core.errors import Conflict
from streams.core.events import NotificationDigested
from streams.core.keys import ShardKeys
from streams.core.scripts import Call, KeyOrArg

# The most a digest holds, in bytes of its items' data: it is due at once when it reaches it.
MAX_BYTES = 1 << 20
# How long a closed digest, and which digest each notification joined, are kept.
KEEP_MS = 86_400_000
HOUR_MS = 3_600_000
# Joins asked again (another notification opened or sealed the digest meanwhile) at most.
MAX_TRIES = 5
# Open digests a process remembers (``OpenDigests``): about 100 bytes each.
OPEN_DIGESTS_KEPT = 100_000


class JoinAsk(msgspec.Struct, frozen=True, kw_only=True):
    """One accepted notification to join its digest: by ``join.lua``, or by the ingest script
    as it accepts it (``DigestJoin``)."""

    notification_id: str
    recipient_id: str
    notification_type: str
    key: str
    producer: str
    locale: str
    recipient: bytes  # the request's recipient (JSON): the digest's notification's addresses
    item: bytes  # the notification's data (JSON)
    closes_ms: int  # when a digest it opens closes (0 for a ``DigestJoin`` naming one open)
    max_items: int
    again: bool = True  # its request was answered before: it may have joined already
    joined: str = ""  # the digest its record names: it joined that one as it was accepted


# How a notification asks to join (``join.lua``): the digest it names was found open, or is a
# new one (none was open); or its request was answered before, so it may have joined; or its
# record names the digest it joined (the ingest script joined it as it accepted it).
OPEN, NEW, AGAIN, JOINED = "open", "new", "again", "joined"
# One notification's part of a ``join.lua`` call: its ask, the digest it names, how it asks,
# and its open digest's key.
JoinCandidate = tuple[JoinAsk, str, str, str]


class Joined(msgspec.Struct, frozen=True):
    digest_id: str
    count: int
    closes_ms: int


class DigestJoin(msgspec.Struct, frozen=True, kw_only=True):
    """A join the ingest script makes as it accepts the notification, which is on its
    recipient's home shard (``streams/ingest/ingest.lua``): ``ask`` naming ``digest_id``
    (the one seen open, or a new one), as ``join.lua`` is asked for one notification."""

    ask: JoinAsk
    open_key: str
    digest_id: str
    how: str  # OPEN or NEW
    now_ms: int
    events: str  # the shard's events stream, where its event goes


def add_join(
    shard: ShardKeys, join: DigestJoin, keys: list[KeyOrArg], args: list[KeyOrArg]
) -> None:
    """Append ``join``'s keys and arguments to an ``ingest.lua`` call's (its header says
    what they are). The notification's record names the digest (``naming_digest``): no
    other key records the join."""
    ask = join.ask
    keys += (join.open_key, shard.digest(join.digest_id), shard.digest_items(join.digest_id))
    args += (
        join.digest_id, join.how, ask.closes_ms, ask.max_items,
        b"%s %s" % (ask.notification_id.encode(), ask.item), ask.recipient,
    )  # fmt: skip
    if join.how == NEW:
        args += (ask.recipient_id, ask.notification_type, ask.key, ask.producer, ask.locale)


async def record_joins(redis: Redis, joins: Sequence[tuple[str, NotificationDigested]]) -> None:
    """Write the events of joins made, each to its shard's events stream (one entry per
    stream), in one round trip."""
    events: dict[str, list[NotificationDigested]] = {}
    for stream, event in joins:
        events.setdefault(stream, []).append(event)
    async with redis.pipeline(transaction=False) as pipe:
        for stream, recorded in events.items():
            pipe.xadd(stream, {"e": codec.encode_events(recorded)})
        await pipe.execute()


def joined_event(ask: JoinAsk, joined: Joined, now_ms: int) -> NotificationDigested:
    """The event of a join made, by the ingest script or ``join.lua``."""
    return NotificationDigested(
        at=at(now_ms), notification_id=ask.notification_id, digest_id=joined.digest_id,
        recipient_id=ask.recipient_id, notification_type=ask.notification_type,
        count=joined.count, closes_at=at(joined.closes_ms),
    )  # fmt: skip


class DigestBusy(Conflict):
    """Digests kept opening and closing under a join (retry the request)."""


class OpenDigests:
    """The digests one process last saw open, by their open key, with when each closes: its
    guess of the digest a notification joins, which ``join.lua`` checks (a wrong guess is
    sent back with the digest open now, and nothing joins it). Reading the open digests
    before each batch instead cost a round trip and a key read per notification. Bounded:
    past ``size``, the one seen first goes."""

    def __init__(self, size: int = OPEN_DIGESTS_KEPT) -> None:
        self._seen: dict[str, tuple[str, int]] = {}
        self._size = size

    def guess(self, open_key: str, now_ms: int) -> str:
        """The digest open at ``open_key`` as last seen ("": none, or its time is up)."""
        seen = self._seen.get(open_key)
        return seen[0] if seen is not None and seen[1] > now_ms else ""

    def saw(self, open_key: str, digest: str, closes_ms: int) -> None:
        """``digest`` is open at ``open_key`` until ``closes_ms``."""
        seen = self._seen
        if open_key not in seen and len(seen) >= self._size:
            del seen[next(iter(seen))]
        seen[open_key] = (digest, closes_ms)

    def __len__(self) -> int:
        return len(self._seen)


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
        candidate, how = _naming(ask, current, now_ms)
        call = digest_join_call(shard, [(ask, candidate, how, open_key)], now_ms)
        [reply] = await scripts.DIGEST_JOIN(redis, *call)
        if reply[0] == b"JOINED":
            joined = Joined(as_text(reply[1]), int(reply[2]), int(reply[3]))
            await record_joins(redis, [(shard.events, joined_event(ask, joined, now_ms))])
            return joined
        current = as_text(reply[1])
        now_ms += 1  # a new candidate, should one be opened in the same millisecond
    raise DigestBusy("digest: it kept changing while joining; retry the request")


def _naming(ask: JoinAsk, guess: str, now_ms: int) -> tuple[str, str]:
    """The digest ``ask`` names and how it asks: the one its record names, else ``guess``
    (seen open; "": a new one, its id derived from ``now_ms``)."""
    if ask.joined:
        return ask.joined, JOINED
    candidate = guess or digest_id(ask.recipient_id, ask.notification_type, ask.key, now_ms)
    return candidate, AGAIN if ask.again else (OPEN if guess else NEW)


def digest_join_call(shard: ShardKeys, joins: Sequence[JoinCandidate], now_ms: int) -> Call:
    """The keys and arguments of a ``join.lua`` call joining ``joins`` in order (its header
    says what they are)."""
    keys: list[KeyOrArg] = [shard.digests_due]
    args: list[KeyOrArg] = [now_ms, MAX_BYTES, KEEP_MS]
    for ask, candidate, how, open_key in joins:
        hour = joined_hour(ask.notification_id)
        keys += (
            open_key or _open_key(shard, ask), shard.digest(candidate),
            shard.digest_items(candidate), shard.digest_joined(hour),
        )  # fmt: skip
        args += (
            candidate, how, max(ask.closes_ms, now_ms), ask.max_items, ask.notification_id,
            ask.item, ask.recipient, (hour + 1) * HOUR_MS + KEEP_MS,
        )  # fmt: skip
        if how == OPEN:  # the digest's own fields are written only by the join that opens it
            args += ("", "", "", "", "")
        else:
            args += (ask.recipient_id, ask.notification_type, ask.key, ask.producer, ask.locale)
    return keys, args


async def join_many(
    redis: Redis,
    asks: Sequence[tuple[ShardKeys, JoinAsk]],
    now_ms: int,
    open_digests: OpenDigests | None = None,
) -> list[Joined | DigestBusy]:
    """Join each (home shard, ask) and record the joins, in order, in two round trips of one
    command per shard each: the joins made (one ``join.lua`` call), their events written
    (XADD). Each ask names the digest ``open_digests`` saw open for it (none: a new one);
    those sent back (a wrong guess, a digest opened or sealed meanwhile) are asked once more
    together with the digest the script named, and then alone, as ``join`` does."""
    seen = open_digests if open_digests is not None else OpenDigests()
    open_keys = [_open_key(shard, ask) for shard, ask in asks]
    guesses = [seen.guess(open_key, now_ms) for open_key in open_keys]
    replies: list[Any] = [None] * len(asks)
    asking, opened_ms = list(range(len(asks))), now_ms
    for _ in range(2):  # the guesses, then what the script named for those sent back
        await _join_round(redis, asks, open_keys, guesses, asking, replies, opened_ms)
        asking = [index for index in asking if replies[index][0] != b"JOINED"]
        if not asking:
            break
        for index in asking:
            guesses[index] = as_text(replies[index][1])
        opened_ms += 1  # a new candidate, should one be opened in the same millisecond
    for open_key, reply in zip(open_keys, replies, strict=True):
        if reply[0] == b"JOINED":
            seen.saw(open_key, as_text(reply[1]), int(reply[3]))
    return await _joined(redis, asks, replies, now_ms)


async def _join_round(  # noqa: PLR0917 (join_many's own lists, handed on)
    redis: Redis,
    asks: Sequence[tuple[ShardKeys, JoinAsk]],
    open_keys: list[str],
    guesses: list[str],
    asking: list[int],
    replies: list[Any],
    now_ms: int,
) -> None:
    """Ask to join the asks numbered ``asking``, each with the digest ``guesses`` names for
    it ("": a new one), in one ``join.lua`` call per shard; their replies into ``replies``."""
    by_shard: dict[int, tuple[ShardKeys, list[int]]] = {}
    for index in asking:
        shard = asks[index][0]
        by_shard.setdefault(shard.shard, (shard, []))[1].append(index)
    calls: list[Call] = []
    for shard, indices in by_shard.values():
        joins: list[JoinCandidate] = []
        for index in indices:
            candidate, how = _naming(asks[index][1], guesses[index], now_ms)
            joins.append((asks[index][1], candidate, how, open_keys[index]))
        calls.append(digest_join_call(shard, joins, now_ms))
    groups = by_shard.values()
    for (_, indices), group in zip(
        groups, await scripts.DIGEST_JOIN.run_many(redis, calls), strict=True
    ):
        for index, reply in zip(indices, group, strict=True):
            replies[index] = reply


async def _joined(
    redis: Redis, asks: Sequence[tuple[ShardKeys, JoinAsk]], replies: list[Any], now_ms: int
) -> list[Joined | DigestBusy]:
    """The joins ``replies`` made, their events written (one entry per shard), and the asks
    sent back asked again alone."""
    results: list[Joined | DigestBusy | None] = []
    events: list[tuple[str, NotificationDigested]] = []
    for (shard, ask), reply in zip(asks, replies, strict=True):
        if reply[0] != b"JOINED":
            results.append(None)
            continue
        joined = Joined(as_text(reply[1]), int(reply[2]), int(reply[3]))
        events.append((shard.events, joined_event(ask, joined, now_ms)))
        results.append(joined)
    await record_joins(redis, events)
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


def joined_hour(notification_id: str) -> int:
    """The hour (since the epoch) a notification was made in, from its id (a UUIDv7, whose
    first 48 bits are its ms): the hour of the hash that records which digest it joined."""
    return int(notification_id[:8] + notification_id[9:13], 16) // HOUR_MS


async def joined_digest(redis: Redis, shard: ShardKeys, notification_id: str) -> str:
    """The id of the digest a notification joined on ``shard`` ("": none it is known to)."""
    found = await redis.hget(shard.digest_joined(joined_hour(notification_id)), notification_id)
    return as_text(found) if found else ""


def _open_id(value: bytes | str | None) -> str:
    """The id in an open digest's value ("<id> <closes ms>"; "" for none)."""
    return as_text(value).partition(" ")[0] if value else ""


def open_digest_key(shard: ShardKeys, recipient_id: str, notification_type: str, key: str) -> str:
    """The key of the digest open for (recipient, type, key) on ``shard``."""
    return shard.digest_open(recipient_id, notification_type, key_digest(key))


def _open_key(shard: ShardKeys, ask: JoinAsk) -> str:
    return open_digest_key(shard, ask.recipient_id, ask.notification_type, ask.key)


async def leave(redis: Redis, shard: ShardKeys, digest: str, notification_id: str) -> str:
    """Take a cancelled notification out of its digest while the digest is open: "LEFT", or
    the digest's state ("sealed", "closed") or "GONE" when too late or not there."""
    call = digest_leave_call(shard, digest, notification_id)
    return as_text(await scripts.DIGEST_LEAVE(redis, *call))


def digest_leave_call(shard: ShardKeys, digest: str, notification_id: str) -> Call:
    """The keys and arguments of one ``leave.lua`` call."""
    return [shard.digest(digest), shard.digest_items(digest)], [notification_id]


def at(ms: int) -> datetime:
    """An event time from ms since the epoch."""
    return datetime.fromtimestamp(ms / 1000, UTC)
