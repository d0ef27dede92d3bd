"""The calls every stream reader shares, on real Redis and on fakeredis: creating a group,
taking over idle entries, and telling and making groups that are gone."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams.core.consumer_groups import (
    autoclaim,
    ensure_all_groups,
    ensure_group,
    is_missing_group,
    missing_groups,
)
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority


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


async def test_a_missing_group_is_told_apart_from_other_errors(
    real_redis: Redis, stream: str
) -> None:
    # Redis's own words (fakeredis words them otherwise).
    with pytest.raises(ResponseError) as missing:
        await real_redis.xreadgroup("g", "c", {stream: ">"})
    assert is_missing_group(missing.value)
    await real_redis.set(stream, "not a stream")
    with pytest.raises(ResponseError) as wrong_type:
        await real_redis.xadd(stream, {"w": b"x"})
    assert not is_missing_group(wrong_type.value)


async def test_every_group_of_every_shard_is_found_missing_and_made(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    shards = keys.all_shards()
    expected = [
        pair
        for shard in shards
        for pair in [
            *[(s, "delivery") for s in shard.work_streams],
            (shard.events, "projector"),
            (shard.events, "status-webhooks"),
        ]
    ]
    assert await missing_groups(redis, shards) == expected
    await ensure_all_groups(redis, shards)
    await ensure_all_groups(redis, shards)  # twice is fine
    assert await missing_groups(redis, shards) == []
    await redis.xgroup_destroy(shards[1].events, "projector")
    assert await missing_groups(redis, shards) == [(shards[1].events, "projector")]
