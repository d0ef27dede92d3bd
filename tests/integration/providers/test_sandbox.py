"""The sandbox provider's record and idempotency, on real Redis and on fakeredis."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from app.providers.base import Message, ProviderError
from app.providers.sandbox import SandboxProvider
from streams.core import scripts
from streams.core.keys import KeySpace
from streams.core.vocabulary import ErrorClass
from tests.servers import redis_server


def message(key: str = "idem-1", attempt: int = 1, data: dict[str, Any] | None = None) -> Message:
    return Message(
        delivery_id=f"dlv-{key}",
        idempotency_key=key,
        channel="EMAIL",
        address="someone@example.com",
        title="Hello",
        body="Body",
        attempt=attempt,
        data=data or {},
    )


async def recorded(redis: Redis, keys: KeySpace) -> list[dict[str, str]]:
    entries = await redis.xrange(keys.sandbox_sent)
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]


async def test_a_plain_send_returns_an_id_and_records_every_field(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    message_id = await SandboxProvider(redis, keys).send(message())
    assert message_id.startswith("sandbox-")
    assert await recorded(redis, keys) == [
        {
            "delivery_id": "dlv-idem-1",
            "idempotency_key": "idem-1",
            "channel": "EMAIL",
            "address": "someone@example.com",
            "attempt": "1",
            "outcome": "sent",
            "duplicate": "0",
            "message_id": message_id,
        }
    ]


async def test_an_idempotent_sandbox_answers_a_repeat_with_the_first_id(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    sandbox = SandboxProvider(redis, keys)
    first = await sandbox.send(message())
    assert await sandbox.send(message(attempt=2)) == first
    # A second process (another provider instance) sees the same memory.
    assert await SandboxProvider(redis, keys).send(message(attempt=3)) == first
    entries = await recorded(redis, keys)
    assert [(e["outcome"], e["duplicate"], e["message_id"]) for e in entries] == [
        ("sent", "0", first),
        ("sent", "1", first),
        ("sent", "1", first),
    ]
    originals = [e for e in entries if e["outcome"] == "sent" and e["duplicate"] == "0"]
    assert len(originals) == 1


async def test_a_send_is_remembered_for_its_window_then_forgotten(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    sandbox = SandboxProvider(redis, keys, remember_ms=60_000)
    first = await sandbox.send(message())
    # One key per sent idempotency key, expiring with the window: nothing grows for ever.
    remaining = await redis.pttl(keys.sandbox_done("idem-1"))
    assert 0 < remaining <= 60_000
    assert await redis.get(keys.sandbox_done("idem-1")) == first.encode()
    assert await sandbox.send(message(attempt=2)) == first  # within the window: a repeat
    await redis.delete(keys.sandbox_done("idem-1"))  # the window has passed
    again = await sandbox.send(message(attempt=3))
    assert again != first
    entries = await recorded(redis, keys)
    assert [(e["duplicate"], e["message_id"]) for e in entries] == [
        ("0", first),
        ("1", first),
        ("0", again),
    ]


async def test_a_non_idempotent_sandbox_sends_a_repeat_again(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    sandbox = SandboxProvider(redis, keys, idempotent=False, name="sandbox_plain")
    assert sandbox.name == "sandbox_plain"
    first = await sandbox.send(message())
    second = await sandbox.send(message(attempt=2))
    assert second != first
    assert second.startswith("sandbox-")
    entries = await recorded(redis, keys)
    assert [(e["duplicate"], e["message_id"]) for e in entries] == [("0", first), ("1", second)]


async def test_failures_before_the_first_send_are_not_duplicates_and_later_calls_are(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    sandbox = SandboxProvider(redis, keys)
    data = {"sandbox": {"EMAIL": {"fail_transient": 1}}}
    with pytest.raises(ProviderError) as caught:
        await sandbox.send(message(data=data))
    assert caught.value.error_class is ErrorClass.TRANSIENT
    first = await sandbox.send(message(attempt=2, data=data))
    # A later permanent failure with the key already sent is recorded as a duplicate call.
    with pytest.raises(ProviderError):
        await sandbox.send(message(attempt=3, data={"sandbox": {"EMAIL": {"fail_permanent": "x"}}}))
    entries = await recorded(redis, keys)
    assert [(e["outcome"], e["duplicate"]) for e in entries] == [
        ("transient", "0"),
        ("sent", "0"),
        ("permanent", "1"),
    ]
    assert entries[1]["message_id"] == first


async def test_200_concurrent_sends_are_each_recorded_once(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    sandbox = SandboxProvider(redis, keys)
    ids = await asyncio.gather(*(sandbox.send(message(f"k{n}")) for n in range(200)))
    assert len(set(ids)) == 200
    entries = await recorded(redis, keys)
    assert len(entries) == 200
    assert {e["idempotency_key"]: e["message_id"] for e in entries} == {
        f"k{n}": ids[n] for n in range(200)
    }
    assert {e["duplicate"] for e in entries} == {"0"}


async def test_concurrent_repeats_of_one_key_send_once(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    sandbox = SandboxProvider(redis, keys)
    ids = await asyncio.gather(*(sandbox.send(message("same", attempt=n)) for n in range(1, 51)))
    assert len(set(ids)) == 1
    entries = await recorded(redis, keys)
    assert len(entries) == 50
    assert sum(e["duplicate"] == "0" for e in entries) == 1


async def test_the_script_is_loaded_again_after_a_flush(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    sandbox = SandboxProvider(real_redis, keys)
    await sandbox.send(message("a"))
    await real_redis.script_flush()
    await asyncio.gather(sandbox.send(message("b")), sandbox.send(message("c")))
    assert await real_redis.script_exists(scripts.SANDBOX_SEND.sha) == [True]
    assert len(await recorded(real_redis, keys)) == 3


async def test_a_redis_that_refuses_writes_is_a_transient_failure(tmp_path: Path) -> None:
    """Out of memory, the sandbox's record was refused and the send counted as a BUG."""
    with redis_server(tmp_path) as url:
        redis = Redis.from_url(url)
        try:
            await redis.set("ballast", "x" * 100_000)
            await redis.config_set("maxmemory", "1")
            with pytest.raises(ProviderError) as refused:
                await SandboxProvider(redis, KeySpace("oom")).send(message())
        finally:
            await redis.config_set("maxmemory", "0")
            await redis.aclose()
    assert refused.value.error_class is ErrorClass.TRANSIENT
    assert "OutOfMemoryError" in refused.value.message
