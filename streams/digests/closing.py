"""Closing due digests in Redis, on their recipients' home shard (``streams.digests.store``
joins them).

A digest is due when its window ends, at its daily time, or at once when it is full; the
shard's due set names each by "<id> <open key>". A closer (``app.digests``) ``take``s due
digests (claimed for ``CLAIM_MS``: another closer does not take them meanwhile, and they come
due again if it dies), seals them (no notification joins one after that: the next opens a
new one) and reads their items (``seal_many``, one script call for a batch), makes each
one's notification with the digest id as the idempotency key and then ``close_many``s them
(one script call, each digest's ``DigestClosed`` written by it). A close repeated after a
crash, or by two closers at once, makes the same notification once and records the digest
closed once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.codec import as_text
from streams.core.events import DigestClosed
from streams.core.keys import ShardKeys
from streams.core.scripts import Call, KeyOrArg
from streams.digests.store import KEEP_MS, at, open_digest_key

# How long a closer's claim on the digests it took lasts: they come due again after it.
CLAIM_MS = 30_000


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
    opened = open_digest_key(shard, as_text(recipient_id), as_text(type_name), as_text(key or b""))
    return f"{digest} {opened}"


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


def digest_take_call(shard: ShardKeys, now_ms: int, limit: int, claim_ms: int) -> Call:
    """The keys and arguments of one ``take.lua`` call."""
    return [shard.digests_due], [now_ms, limit, claim_ms]


def digest_close_call(shard: ShardKeys, closes: Sequence[tuple[Sealed, str]], now_ms: int) -> Call:
    """The keys and arguments of a ``close.lua`` call closing ``closes`` (each sealed digest
    and the notification made of it; its header says what they are)."""
    keys: list[KeyOrArg] = [shard.digests_due, shard.events]
    args: list[KeyOrArg] = [now_ms, KEEP_MS]
    closed_at = at(now_ms)
    for sealed, notification_id in closes:
        event = DigestClosed(
            at=closed_at, digest_id=sealed.digest_id, recipient_id=sealed.recipient_id,
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
