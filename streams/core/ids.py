"""Notification and delivery ids: time-ordered UUIDs (version 7) that carry their shard.

Time order keeps Postgres index inserts local and makes keyset pagination follow creation
time. The last 16 bits hold the shard number, so any id can be looked up in the Redis write
model without an index; 58 random bits per millisecond remain.
"""

from __future__ import annotations

import functools
import random
import uuid

from streams.core import clock

_SHARD_BITS = 16
MAX_SHARDS = 1 << _SHARD_BITS
# The hex digit of the variant nibble ("10" then two random bits) for each random digit.
_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
# Where each id's random parts come from in the string of random digits (16 per id): the 3
# digits after the version, the one that picks the variant digit, 3 more, then 8.
_MAX_IDS = 64
_PARTS = [
    (slice(i, i + 3), i + 3, slice(i + 4, i + 7), slice(i + 7, i + 15))
    for i in range(0, 16 * _MAX_IDS, 16)
]


@functools.lru_cache(maxsize=4)
def _head(ms: int) -> str:
    """The first 15 digits of an id made in millisecond ``ms``, up to the version: ids come
    in bursts, so this is remembered for a few milliseconds."""
    millis = f"{ms & ((1 << 48) - 1):012x}"
    return f"{millis[:8]}-{millis[8:]}-7"


def new_id(shard: int, now_ms: int | None = None) -> str:
    """A fresh UUIDv7 string whose low 16 bits are ``shard``."""
    return new_ids(shard, 1, now_ms)[0]


def new_ids(shard: int, count: int, now_ms: int | None = None) -> list[str]:
    """``count`` fresh UUIDv7 strings of one shard and millisecond.

    Layout: 48 bits of Unix milliseconds, version 7, 12 random bits, the variant with 2
    random bits, 46 more random bits, then the shard. Every accepted notification needs
    several ids, so they are cut from one string of random hex digits.
    """
    if not 0 <= shard < MAX_SHARDS:
        raise ValueError(f"shard {shard} is out of range")
    ms = clock.now_ms() if now_ms is None else now_ms
    if count > _MAX_IDS:
        return new_ids(shard, _MAX_IDS, ms) + new_ids(shard, count - _MAX_IDS, ms)
    head = _head(ms)
    tail = f"{shard:04x}"
    # Ids must be unique, not secret: the process-wide PRNG (reseeded after a fork) is
    # enough, and far cheaper than a system call. 15 of each 16 random digits are used.
    noise = random.randbytes(8 * count).hex()
    variant = _VARIANT_DIGIT
    return [
        f"{head}{noise[a]}-{variant[noise[v]]}{noise[b]}-{noise[c]}{tail}"
        for a, v, b, c in _PARTS[:count]
    ]


def is_uuid(text: str) -> bool:
    """True when ``text`` is a canonical UUID string (the shape every Clarion id has)."""
    if len(text) != 36:
        return False
    try:
        return str(uuid.UUID(text)) == text.lower()
    except ValueError:
        return False
