"""Start-up checks against Redis servers configured in the ways that matter."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from app.processes.redis_checks import RedisNotReady, check_redis
from tests.servers import free_port, redis_server


async def check(url: str) -> str:
    redis = Redis.from_url(url)
    try:
        return await check_redis(redis, url)
    finally:
        await redis.aclose()


async def test_eviction_policy_refuses_to_start(tmp_path: Path) -> None:
    with (
        redis_server(tmp_path, "--maxmemory-policy", "allkeys-lru") as url,
        pytest.raises(RedisNotReady) as refused,
    ):
        await check(url)
    assert "allkeys-lru" in str(refused.value)
    assert "noeviction" in str(refused.value)  # says how to fix it


async def test_a_cluster_node_refuses_to_start_by_name(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.conf"
    with (
        redis_server(
            tmp_path, "--cluster-enabled", "yes", "--cluster-config-file", str(nodes)
        ) as url,
        pytest.raises(RedisNotReady) as refused,
    ):
        await check(url)
    assert "a node of a Redis Cluster" in str(refused.value)
    assert "standalone Redis" in str(refused.value)  # says what to do instead


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (("--appendonly", "no"), "no AOF"),
        (("--appendonly", "yes", "--appendfsync", "always"), "no accepted notification is lost"),
        (("--appendonly", "yes", "--appendfsync", "everysec"), "up to 1 s"),
    ],
)
async def test_durability_guarantee_is_stated(
    tmp_path: Path, options: tuple[str, ...], words: str
) -> None:
    with redis_server(tmp_path, *options) as url:
        assert words in await check(url)


async def test_unreachable_redis_is_a_clear_error() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(RedisNotReady, match="not reachable"):
        await check(url)


async def test_a_start_up_error_never_shows_the_redis_password() -> None:
    """The URL with its password was once printed when Redis could not be reached."""
    url = f"redis://clarion:hunter2-secret@127.0.0.1:{free_port()}/0"
    with pytest.raises(RedisNotReady) as refused:
        await check(url)
    assert "hunter2-secret" not in str(refused.value)
    assert "clarion@127.0.0.1" in str(refused.value)
