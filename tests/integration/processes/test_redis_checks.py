"""Start-up checks against Redis servers configured in the ways that matter."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.exceptions import TimeoutError as RedisTimeout

from app.processes.redis_checks import RedisNotReady, check_redis
from streams.core.connection import connect
from tests.servers import free_cluster_port, free_port, redis_cluster, redis_server


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
    assert "redis+cluster://" in str(refused.value)  # says how to name a cluster


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


async def stalled(*_: object, **__: object) -> None:
    """A CONFIG GET that times out: the server stopped answering after INFO (it is being
    restarted, say)."""
    raise RedisTimeout("Timeout reading from 127.0.0.1")


async def test_a_redis_that_stops_answering_during_the_checks_is_not_ready(
    tmp_path: Path,
) -> None:
    with redis_server(tmp_path) as url:
        redis = Redis.from_url(url)
        redis.config_get = stalled  # type: ignore[method-assign]
        with pytest.raises(RedisNotReady, match="not reachable"):
            await check_redis(redis, url)
        await redis.aclose()


# A Redis Cluster: every master is checked.


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[RedisCluster, str]]:
    with redis_cluster(tmp_path) as url:
        client = connect(url)
        assert isinstance(client, RedisCluster)
        await client.initialize()
        yield client, url
        await client.aclose()


def masters(cluster: RedisCluster) -> list[ClusterNode]:
    """The masters, in the order of their ports."""
    return sorted(cluster.get_primaries(), key=lambda n: n.port)


async def set_on(cluster: RedisCluster, node: int | None, *setting: str) -> None:
    """CONFIG SET on one master (by index) or on every one (None)."""
    for target in masters(cluster) if node is None else [masters(cluster)[node]]:
        await cluster.execute_command("CONFIG", "SET", *setting, target_nodes=target)


async def test_a_cluster_states_the_guarantee_of_its_weakest_master(
    cluster: tuple[RedisCluster, str],
) -> None:
    client, url = cluster
    assert "no AOF" in await check_redis(client, url)
    await set_on(client, None, "appendonly", "yes", "appendfsync", "always")
    assert "no accepted notification is lost" in await check_redis(client, url)
    await set_on(client, 1, "appendfsync", "everysec")
    weakest = await check_redis(client, url)
    node = masters(client)[1].name
    assert "up to 1 s" in weakest
    assert f"on {node}; the nodes differ" in weakest


async def test_an_evicting_master_of_a_cluster_refuses_to_start_by_name(
    cluster: tuple[RedisCluster, str],
) -> None:
    client, url = cluster
    await set_on(client, 2, "maxmemory-policy", "allkeys-lru")
    with pytest.raises(RedisNotReady) as refused:
        await check_redis(client, url)
    node = masters(client)[2].name
    assert f"'allkeys-lru' on the cluster's node {node}" in str(refused.value)


async def test_an_unreachable_cluster_is_a_clear_error_without_the_password() -> None:
    url = f"redis+cluster://ops:hunter2-secret@127.0.0.1:{free_cluster_port()}"
    client = connect(url)
    with pytest.raises(RedisNotReady, match="not reachable or not ready") as refused:
        await check_redis(client, url)
    assert "hunter2-secret" not in str(refused.value)
    await client.aclose()


async def test_a_master_that_stops_answering_during_the_checks_is_not_ready(
    cluster: tuple[RedisCluster, str],
) -> None:
    """A worker once crashed with a traceback here while the chaos suite restarted a master:
    a start refused is retried by whoever starts it, a crash is not."""
    client, url = cluster
    client.config_get = stalled  # type: ignore[method-assign]
    with pytest.raises(RedisNotReady, match="not reachable or not ready"):
        await check_redis(client, url)
