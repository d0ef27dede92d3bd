"""Readiness against real Redis and PostgreSQL: each check says what is wrong, a missing
group is made again, a Redis that refuses writes or a PostgreSQL that is away is not ready."""

from __future__ import annotations

from pathlib import Path

import asyncpg
from redis.asyncio import Redis

from app.operations.readiness import readiness
from streams.core.consumer_groups import DELIVERY_GROUP, ensure_all_groups
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from tests.servers import redis_server


def pool_of(pool: asyncpg.Pool | None):  # type: ignore[no-untyped-def]
    async def read_model() -> asyncpg.Pool | None:
        return pool

    return read_model


async def test_ready_when_every_check_passes(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    await ensure_all_groups(real_redis, keys.all_shards())
    result = await readiness(real_redis, keys, pool_of(pool))
    assert result.checks == {"redis": "ok", "consumer_groups": "ok", "postgresql": "ok"}
    assert result.ready


async def test_a_missing_group_is_named_and_made_again(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    await ensure_all_groups(real_redis, keys.all_shards())
    stream = keys.shard(0).work(Priority.LOW)
    await real_redis.xgroup_destroy(stream, DELIVERY_GROUP)
    first = await readiness(real_redis, keys, pool_of(pool))
    assert not first.ready
    assert first.checks["consumer_groups"] == f"missing, made again now: 'delivery' on {stream}"
    assert (await readiness(real_redis, keys, pool_of(pool))).ready


async def test_a_redis_that_refuses_writes_is_not_ready(tmp_path: Path, pool: asyncpg.Pool) -> None:
    with redis_server(tmp_path) as url:
        redis = Redis.from_url(url)
        try:
            keys = KeySpace("ready")
            await ensure_all_groups(redis, keys.all_shards())
            await redis.set("ballast", "x" * 100_000)
            await redis.config_set("maxmemory", "1")
            result = await readiness(redis, keys, pool_of(pool))
            await redis.config_set("maxmemory", "0")
        finally:
            await redis.aclose()
    assert not result.ready
    assert result.checks["redis"] == (
        "refuses writes: command not allowed when used memory > 'maxmemory'."
    )
    assert result.checks["consumer_groups"] == "not checked: Redis is not usable"


async def test_an_unreachable_redis_or_postgresql_is_not_ready(real_redis: Redis) -> None:
    gone = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    try:
        result = await readiness(gone, KeySpace("ready"), pool_of(None))
    finally:
        await gone.aclose()
    assert result.checks["redis"].startswith("unreachable (")
    assert result.checks["postgresql"] == "unreachable: the read model cannot be queried"
