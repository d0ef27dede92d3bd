"""Deliveries waiting for an address: a type with ``await_address_seconds`` in the catalog
keeps a delivery the recipient has no address for in ``delayed`` (``DeliveryDeferred``,
``awaiting_address``), and a worker looks at the recipient's profile each time it comes due.

Each shard keeps, per recipient, an index of such deliveries' ``delayed`` members
(``ShardKeys.awaiting``), scored by until when each may wait, at most ``MAX_INDEXED`` of
them, expiring with the last wait. A worker puts a member in when it sends one back to wait
(``wait``); a profile change makes every indexed member due now, on every shard
(``release``), so the recipient's waiting deliveries are looked at again within the
scheduler's second. A worker hands ``wait`` the settings version it read the profile at: a
change since then (which found nothing to release) makes the member due at once, so a
change is never missed between the read and the wait. ``await_address.lua`` does both.
"""

from __future__ import annotations

from redis.asyncio import Redis

from streams.core import scripts
from streams.core.keys import KeySpace, ShardKeys
from streams.core.scripts import Call, KeyOrArg

# Waiting deliveries one recipient's index keeps per shard; any more wait for their next
# look (at most ``MAX_STEP_MS``) instead of being released at once.
MAX_INDEXED = 100
FIRST_STEP_MS = 1000  # the first look, after ingest
MAX_STEP_MS = 60_000  # the longest between two looks


def next_look_ms(created_ms: int, now_ms: int, until_ms: int) -> int:
    """When to look again: after as long as the delivery has waited so far (1 s, 2 s, 4 s
    …), at most ``MAX_STEP_MS``, and never after ``until_ms``."""
    step = min(MAX_STEP_MS, max(FIRST_STEP_MS, now_ms - created_ms))
    return min(now_ms + step, until_ms)


async def wait(
    redis: Redis,
    shard: ShardKeys,
    *,
    recipient_id: str,
    member: bytes,
    until_ms: int,
    settings_version: int,
) -> bool:
    """Index a member that went back to wait; True when the recipient's settings changed
    since ``settings_version`` (the member is due now)."""
    call = await_address_call(shard, recipient_id, (member, until_ms, settings_version))
    return bool(await scripts.AWAIT_ADDRESS(redis, *call))


async def release(redis: Redis, keys: KeySpace, recipient_id: str) -> int:
    """Make the recipient's waiting deliveries due now, on every shard; how many."""
    calls = [await_address_call(shard, recipient_id) for shard in keys.all_shards()]
    return sum(int(n) for n in await scripts.AWAIT_ADDRESS.run_many(redis, calls))


def await_address_call(
    shard: ShardKeys, recipient_id: str, waiting: tuple[bytes, int, int] | None = None
) -> Call:
    """The keys and arguments of one ``await_address.lua`` call: "wait" for ``waiting`` (the
    member, until when it may wait in ms, the settings version seen), else "release".

    KEYS: the recipient's index, delayed, the recipient's settings. ARGV: "release"; or
    "wait", the member, until when, the settings version seen, ``MAX_INDEXED``.
    """
    keys: list[KeyOrArg] = [
        shard.awaiting(recipient_id), shard.delayed, shard.recipient(recipient_id)
    ]  # fmt: skip
    if waiting is None:
        return keys, ["release"]
    member, until_ms, settings_version = waiting
    return keys, ["wait", member, until_ms, settings_version, MAX_INDEXED]
