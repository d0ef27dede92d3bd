"""Clarion's Redis client on real Redis: commands packed by hiredis arrive intact, and pooled
connections outlive a Redis restart."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from streams.connection import HiredisPackingConnection, connect
from tests.conftest import REDIS_URL, delete_prefix
from tests.servers import free_port, wait_for_port

AWKWARD = [b"", b"\r\n", b"\x00\xff binary", "Grüße, 你好 ✉".encode(), b"$3\r\nSET", b"x" * 100_000]


@pytest.fixture
async def client(key_prefix: str) -> AsyncIterator[Redis]:
    redis = connect(REDIS_URL)
    yield redis
    await delete_prefix(redis, key_prefix)
    await redis.aclose()


async def test_a_tcp_url_gets_the_hiredis_packing_connection(client: Redis) -> None:
    assert client.connection_pool.connection_class is HiredisPackingConnection
    assert await client.ping()


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


async def test_a_command_with_many_arguments_arrives_whole(client: Redis, key_prefix: str) -> None:
    fields = {f"field-{n}": f"value-{n}\r\n" for n in range(1000)}
    stream = f"{key_prefix}:stream"
    await client.xadd(stream, fields)  # type: ignore[arg-type]
    [(_, stored)] = await client.xrange(stream)
    assert stored == {name.encode(): value.encode() for name, value in fields.items()}


async def test_commands_named_in_two_words_are_understood(client: Redis, key_prefix: str) -> None:
    # redis-py sends these as one "WORD WORD" argument; Redis needs two.
    assert await client.config_get("maxmemory-policy")
    stream = f"{key_prefix}:stream"
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    assert [group["name"] for group in await client.xinfo_groups(stream)] == [b"g"]
    sha = await client.script_load("return ARGV[1]")
    assert await client.evalsha(sha, 0, b"\r\nok\x00") == b"\r\nok\x00"


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
