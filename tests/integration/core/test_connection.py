"""Clarion's Redis client on real Redis: commands packed by hiredis arrive intact, and pooled
connections outlive a Redis restart. On a real three-master Redis Cluster: the streams
layer's batched script calls, clock reads and multi-key reads through ``connect_cluster``."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import pytest
from redis.asyncio import Redis, RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.exceptions import ConnectionError

from app.status_webhooks.owners import Owners
from streams.core.connection import (
    HiredisPackingConnection,
    connect,
    connect_cluster,
    connect_sync,
)
from streams.core.keys import KeySpace, shard_from_id
from streams.metrics.backlog import read_backlog
from streams.status_webhooks.store import StatusWebhookStore, read_outboxes
from tests.conftest import REDIS_URL, delete_prefix
from tests.integration.delivery_support import accept, fast_catalog, running_worker, wait_until
from tests.servers import free_port, redis_cluster, wait_for_port

AWKWARD = [b"", b"\r\n", b"\x00\xff binary", "Grüße, 你好 ✉".encode(), b"$3\r\nSET", b"x" * 100_000]


@pytest.fixture
async def client(key_prefix: str) -> AsyncIterator[Redis]:
    redis = connect(REDIS_URL)
    yield redis
    await delete_prefix(redis, key_prefix)
    await redis.aclose()


@pytest.mark.standalone_redis
async def test_a_tcp_url_gets_the_hiredis_packing_connection(client: Redis) -> None:
    assert client.connection_pool.connection_class is HiredisPackingConnection
    assert await client.ping()


@pytest.mark.standalone_redis
async def test_values_of_every_kind_arrive_byte_for_byte(client: Redis, key_prefix: str) -> None:
    for n, value in enumerate(AWKWARD):
        await client.set(f"{key_prefix}:bytes:{n}", value)
    await client.set(f"{key_prefix}:text", "Grüße ✉")
    await client.set(f"{key_prefix}:int", 42)
    await client.incrby(f"{key_prefix}:int", -50)
    got = [await client.get(f"{key_prefix}:bytes:{n}") for n in range(len(AWKWARD))]
    assert got == AWKWARD
    assert await client.get(f"{key_prefix}:text") == "Grüße ✉".encode()
    assert await client.get(f"{key_prefix}:int") == b"-8"


@pytest.mark.standalone_redis
async def test_a_command_with_many_arguments_arrives_whole(client: Redis, key_prefix: str) -> None:
    fields = {f"field-{n}": f"value-{n}\r\n" for n in range(1000)}
    stream = f"{key_prefix}:stream"
    await client.xadd(stream, fields)  # type: ignore[arg-type]
    [(_, stored)] = await client.xrange(stream)
    assert stored == {name.encode(): value.encode() for name, value in fields.items()}


@pytest.mark.standalone_redis
async def test_commands_named_in_two_words_are_understood(client: Redis, key_prefix: str) -> None:
    # redis-py sends these as one "WORD WORD" argument; Redis needs two.
    assert await client.config_get("maxmemory-policy")
    stream = f"{key_prefix}:stream"
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    assert [group["name"] for group in await client.xinfo_groups(stream)] == [b"g"]
    sha = await client.script_load("return ARGV[1]")
    assert await client.evalsha(sha, 0, b"\r\nok\x00") == b"\r\nok\x00"


@pytest.mark.standalone_redis
async def test_a_pipeline_is_packed_and_answered_in_order(client: Redis, key_prefix: str) -> None:
    async with client.pipeline(transaction=True) as pipe:
        for n, value in enumerate(AWKWARD):
            pipe.set(f"{key_prefix}:p:{n}", value)
        for n in range(len(AWKWARD)):
            pipe.get(f"{key_prefix}:p:{n}")
        replies = await pipe.execute()
    assert replies == [True] * len(AWKWARD) + AWKWARD


async def test_pooled_connections_survive_a_redis_restart(tmp_path: Path) -> None:
    """After a restart every pooled connection failed its next command, however much later."""
    port = free_port()

    def start() -> subprocess.Popen[bytes]:
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                   "--dir", str(tmp_path), "--save", "", "--appendonly", "no"]  # fmt: skip
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        wait_for_port(port)
        return server

    server = start()
    redis = connect(f"redis://127.0.0.1:{port}/0", max_connections=64, health_check_interval=30)
    try:
        await asyncio.gather(*(redis.ping() for _ in range(8)))  # eight pooled connections
        server.kill()
        server.wait()
        server = start()
        replies = await asyncio.gather(
            *(redis.set(f"k{n}", "v") for n in range(8)), return_exceptions=True
        )
        assert replies == [True] * 8
    finally:
        await redis.aclose()
        server.kill()
        server.wait()


# A Redis Cluster: the streams layer's calls through ``connect_cluster``


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private three-master cluster for this module's tests."""
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as url:
        yield url


@pytest.fixture
async def cluster(cluster_url: str) -> AsyncIterator[RedisCluster]:
    client = connect_cluster(cluster_url)
    await client.initialize()  # learns which node holds which slots
    yield client
    await client.aclose()


def test_a_cluster_url_names_its_nodes_and_credentials_and_nothing_else_passes() -> None:
    client = connect_cluster("redis+cluster://ops:p%40ss@10.0.0.1:7000,10.0.0.2:7001")
    assert sorted(client.nodes_manager.startup_nodes) == ["10.0.0.1:7000", "10.0.0.2:7001"]
    assert client.connection_kwargs["username"] == "ops"
    assert client.connection_kwargs["password"] == "p@ss"
    with pytest.raises(ValueError, match="redis\\+cluster://") as refused:
        connect_cluster("redis://ops:secret@10.0.0.1:7000")
    assert "secret" not in str(refused.value)


def test_a_synchronous_client_of_a_cluster_reaches_every_node(
    cluster_url: str, key_prefix: str
) -> None:
    client = connect_sync(cluster_url)
    assert isinstance(client, SyncRedisCluster)
    keys = [f"{key_prefix}:{{{n}}}:k" for n in range(12)]  # hash tags on every master
    for key in keys:
        client.set(key, key)
    assert [client.get(key) for key in keys] == [key.encode() for key in keys]
    assert sorted(client.scan_iter(match=f"{key_prefix}:*")) == sorted(k.encode() for k in keys)
    client.delete(*keys)
    client.close()


async def test_every_node_of_a_cluster_gets_the_hiredis_packing_connection(
    cluster: RedisCluster, key_prefix: str
) -> None:
    keys = [f"{key_prefix}:{{{n}}}:k" for n in range(12)]  # hash tags on every master
    assert len({cluster.get_node_from_key(key).name for key in keys}) == 3
    for n, key in enumerate(keys):
        await cluster.set(key, AWKWARD[n % len(AWKWARD)])
    for n, key in enumerate(keys):
        assert await cluster.get(key) == AWKWARD[n % len(AWKWARD)]
    assert {node.connection_class for node in cluster.get_nodes()} == {HiredisPackingConnection}
    await cluster.delete(*keys)


async def test_a_connection_closed_under_a_command_fails_as_a_connection_error(
    cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py's cluster client closes a failed node's idle connections while another task
    may be sending on one, and a Redis that dies during a reconnect's handshake closes it
    under the command: that must be an error the client and Clarion retry."""
    node = cluster.get_primaries()[0]
    connection = HiredisPackingConnection(host=node.host, port=node.port)
    await connection.connect()

    async def closed_meanwhile() -> None:  # another task's disconnect during this await
        await connection.disconnect()

    monkeypatch.setattr(connection, "check_health", closed_meanwhile)
    with pytest.raises(ConnectionError, match="closed"):
        await connection.send_packed_command(connection.pack_command("PING"))

    async def transport_closed(*_: object) -> None:  # how uvloop says it
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>")

    other = HiredisPackingConnection(host=node.host, port=node.port, socket_timeout=5)
    await other.connect()
    monkeypatch.setattr(other, "_send_packed_command", transport_closed)
    with pytest.raises(ConnectionError, match="closed"):
        await other.send_packed_command(other.pack_command("PING"))
    await other.disconnect()


async def test_notifications_of_every_shard_are_accepted_and_delivered_across_the_nodes(
    cluster: RedisCluster, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=8)
    redis = cast(Redis, cluster)  # the commands the streams layer sends, it answers alike
    nodes = {cluster.get_node_from_key(shard.events).name for shard in keys.all_shards()}
    assert len(nodes) == 3  # the shards' hash tags fall on every master
    catalog = fast_catalog()
    # Batched script calls (one pipeline, several nodes), each node's scripts loaded on its
    # first NOSCRIPT.
    answers = await asyncio.gather(
        *(
            accept(redis, keys, catalog, {"recipient": {"id": f"u-{n}", "email": "a@b.example"},
                                          "type": "order_confirmed", "data": {"order_id": n}},
                   f"k{n}")
            for n in range(40)
        )
    )  # fmt: skip
    shards = {shard_from_id(answer["id"]) for answer in answers}
    assert len(shards) > 4

    async def all_sent() -> bool:
        return int(await redis.xlen(keys.sandbox_sent)) == 40

    async with running_worker(redis, keys, catalog):
        await wait_until(all_sent, within=20)

    backlog = await read_backlog(redis, keys)  # the Redis clock read through a key's node
    assert abs(backlog.now_ms - time.time() * 1000) < 5000
    assert len(backlog.shards) == 8
    assert backlog.dlq_size == 0


async def test_records_of_many_shards_and_producers_are_read_together(
    cluster: RedisCluster, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=8)
    redis = cast(Redis, cluster)
    store = StatusWebhookStore(redis, keys)
    for producer in ("orders", "auth", "marketing"):  # each with a hash tag of its own
        await store.put(producer, f"https://{producer}.example/hooks", "s" * 32)
    assert sorted(await store.all()) == ["auth", "marketing", "orders"]
    figures = await read_outboxes(redis, keys)  # the Redis clock read through a key's node
    assert sorted(figure.producer for figure in figures) == ["auth", "marketing", "orders"]
    catalog = fast_catalog()
    answers = [
        await accept(redis, keys, catalog, {"recipient": {"id": f"u-{n}", "email": "a@b.example"},
                                            "type": "order_confirmed", "data": {"order_id": n}},
                     f"o{n}")
        for n in range(12)
    ]  # fmt: skip
    owners = Owners(redis, keys)
    pairs = [(answer["id"], answer["deliveries"][0]["id"]) for answer in answers]
    assert await owners.look_up(pairs)
    assert {owners.owner(nid).producer for nid, _ in pairs} == {"orders"}  # type: ignore[union-attr]
