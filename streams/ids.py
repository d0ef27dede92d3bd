"""Notification and delivery ids: time-ordered UUIDs (version 7) that carry their shard.

Time order keeps Postgres index inserts local and makes keyset pagination follow creation
time. The last 16 bits hold the shard number, so any id can be looked up in the Redis write
model without an index; 58 random bits per millisecond remain.
"""

from __future__ import annotations

import os
import time
import uuid

_SHARD_BITS = 16
MAX_SHARDS = 1 << _SHARD_BITS


def new_id(shard: int, now_ms: int | None = None) -> str:
    """A fresh UUIDv7 string whose low 16 bits are ``shard``."""
    if not 0 <= shard < MAX_SHARDS:
        raise ValueError(f"shard {shard} is out of range")
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a = rand >> 68  # 12 bits
    rand_b = (rand >> _SHARD_BITS) & ((1 << (62 - _SHARD_BITS)) - 1)
    value = (
        (ms & ((1 << 48) - 1)) << 80
        | 0x7 << 76
        | rand_a << 64
        | 0b10 << 62
        | rand_b << _SHARD_BITS
        | shard
    )
    return str(uuid.UUID(int=value))


def is_uuid(text: str) -> bool:
    """True when ``text`` is a canonical UUID string (the shape every Clarion id has)."""
    if len(text) != 36:
        return False
    try:
        return str(uuid.UUID(text)) == text.lower()
    except ValueError:
        return False
