"""Notification and delivery ids: time-ordered UUIDs (version 7) that carry their shard.

Time order keeps Postgres index inserts local and makes keyset pagination follow creation
time. The last 16 bits hold the shard number, so any id can be looked up in the Redis write
model without an index; 58 random bits per millisecond remain.
"""

from __future__ import annotations

import random
import time
import uuid

_SHARD_BITS = 16
MAX_SHARDS = 1 << _SHARD_BITS
_RAND_A_BITS = 12
_RAND_B_BITS = 62 - _SHARD_BITS
_RAND_B_MASK = (1 << _RAND_B_BITS) - 1
_RANDOM_BITS = _RAND_A_BITS + _RAND_B_BITS


def new_id(shard: int, now_ms: int | None = None) -> str:
    """A fresh UUIDv7 string whose low 16 bits are ``shard``."""
    return new_ids(shard, 1, now_ms)[0]


def new_ids(shard: int, count: int, now_ms: int | None = None) -> list[str]:
    """``count`` fresh UUIDv7 strings of one shard and millisecond."""
    if not 0 <= shard < MAX_SHARDS:
        raise ValueError(f"shard {shard} is out of range")
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    millis = f"{ms & ((1 << 48) - 1):012x}"
    head = f"{millis[:8]}-{millis[8:]}-7"  # 48 bits of time, then the version
    ids = []
    for _ in range(count):
        # Ids must be unique, not secret: the process-wide PRNG (reseeded after a fork) is
        # enough, and far cheaper than a system call per id.
        rand = random.getrandbits(_RANDOM_BITS)
        low = f"{0b10 << 62 | (rand & _RAND_B_MASK) << _SHARD_BITS | shard:016x}"
        ids.append(f"{head}{rand >> _RAND_B_BITS:03x}-{low[:4]}-{low[4:]}")
    return ids


def is_uuid(text: str) -> bool:
    """True when ``text`` is a canonical UUID string (the shape every Clarion id has)."""
    if len(text) != 36:
        return False
    try:
        return str(uuid.UUID(text)) == text.lower()
    except ValueError:
        return False
