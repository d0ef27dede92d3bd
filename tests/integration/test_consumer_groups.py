"""The calls every stream reader shares, on real Redis and on fakeredis: creating a group,
taking over idle entries, and how often each was handed out."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams.consumer_groups import autoclaim, delivery_counts, ensure_group
from streams.keys import KeySpace
from streams.vocabulary import Priority


@pytest.fixture
def stream(key_prefix: str) -> str:
    return KeySpace(key_prefix).shard(0).work(Priority.HIGH)


async def test_a_group_is_created_once_and_reads_from_the_start(redis: Redis, stream: str) -> None:
    first = await redis.xadd(stream, {"w": b"before the group"})
    await ensure_group(redis, stream, "g")
    await ensure_group(redis, stream, "g")  # a second process starting: no error
    assert [group["name"] for group in await redis.xinfo_groups(stream)] == [b"g"]
    [(_, entries)] = await redis.xreadgroup("g", "c", {stream: ">"})
    assert [entry_id for entry_id, _ in entries] == [first]


async def test_a_group_on_a_missing_stream_creates_the_stream(redis: Redis, stream: str) -> None:
    await ensure_group(redis, stream, "g")
    assert await redis.xlen(stream) == 0
    assert await redis.type(stream) == b"stream"


async def test_other_errors_are_not_swallowed(redis: Redis, stream: str) -> None:
    await redis.set(stream, "not a stream")
    with pytest.raises(ResponseError):
        await ensure_group(redis, stream, "g")


async def test_autoclaim_takes_idle_entries_and_names_those_trimmed_away(
    redis: Redis, stream: str
) -> None:
    await ensure_group(redis, stream, "g")
    ids = [(await redis.xadd(stream, {"w": str(n).encode()})).decode() for n in range(3)]
    await redis.xreadgroup("g", "crashed", {stream: ">"})
    await redis.xdel(stream, ids[1])  # trimmed while it was pending

    cursor, claimed, deleted = await autoclaim(
        redis, stream, "g", "rescuer", min_idle_ms=0, start="0-0", count=10
    )

    assert cursor == "0-0"  # swept to the end
    assert claimed == [(ids[0], {b"w": b"0"}), (ids[2], {b"w": b"2"})]
    assert deleted == [ids[1]]
    pending = await redis.xpending_range(stream, "g", "-", "+", 10)
    owners = {p["message_id"].decode(): p["consumer"].decode() for p in pending}
    assert owners == {ids[0]: "rescuer", ids[2]: "rescuer"}


async def test_autoclaim_leaves_entries_that_are_not_idle_long_enough(
    redis: Redis, stream: str
) -> None:
    await ensure_group(redis, stream, "g")
    await redis.xadd(stream, {"w": b"x"})
    await redis.xreadgroup("g", "busy", {stream: ">"})
    _, claimed, deleted = await autoclaim(
        redis, stream, "g", "rescuer", min_idle_ms=60_000, start="0-0", count=10
    )
    assert (claimed, deleted) == ([], [])


async def test_delivery_counts_say_how_often_each_entry_was_handed_out(
    redis: Redis, stream: str
) -> None:
    await ensure_group(redis, stream, "g")
    ids = [(await redis.xadd(stream, {"w": b"x"})).decode() for _ in range(3)]
    await redis.xreadgroup("g", "a", {stream: ">"}, count=2)  # the first two, once each
    await autoclaim(redis, stream, "g", "b", min_idle_ms=0, start="0-0", count=1)  # the first
    await redis.xack(stream, "g", ids[1])

    counts = await delivery_counts(redis, stream, "g", ids)

    assert counts == {ids[0]: 2}  # the second was acknowledged, the third never read
    assert await delivery_counts(redis, stream, "g", []) == {}
