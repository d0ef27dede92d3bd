"""The projector against real Redis and PostgreSQL: ordered, crash-safe, and through a
PostgreSQL outage under load (ingest goes on, the projector catches up, nothing lost)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

import projections.projector as projector_module
import projections.rows as rows_module
from projections.database import connect
from projections.projector import Projector
from projections.rows import apply, rows_of
from streams.core import codec
from streams.core.consumer_groups import PROJECTOR_GROUP
from streams.core.keys import KeySpace
from tests.integration.delivery_support import (
    accept,
    fast_catalog,
    running_worker,
    state,
    wait_until,
)
from tests.integration.projection_support import DID, snapshot, story
from tests.servers import postgres_server


async def test_a_projector_killed_between_commit_and_ack_duplicates_nothing(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    stream = keys.shard(0).events
    await real_redis.xgroup_create(stream, PROJECTOR_GROUP, id="0", mkstream=True)
    for batch in story():
        await real_redis.xadd(stream, {"e": codec.encode_events(batch)})
    # A projector read everything and committed, then died before XACK.
    reply: Any = await real_redis.xreadgroup(
        PROJECTOR_GROUP, "host-projector", {stream: ">"}, count=10
    )
    read = [(entry_id.decode(), fields[b"e"]) for entry_id, fields in reply[0][1]]
    await apply(pool, stream, rows_of(0, read))
    committed = await snapshot(pool)
    # Restarted under the same name, it drains its own pending entries first.
    projector = Projector(real_redis, pool, keys, consumer="host-projector")
    task = asyncio.create_task(projector.run())

    async def drained() -> bool:
        return (await real_redis.xpending(stream, PROJECTOR_GROUP))["pending"] == 0

    await wait_until(drained)
    projector.stop()
    await task
    assert await snapshot(pool) == committed


async def test_the_projector_goes_on_after_redis_was_unreachable(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeySpace(key_prefix)
    read = real_redis.xreadgroup
    failed = False

    async def unreachable_once(*args: Any, **kwargs: Any) -> Any:
        nonlocal failed
        if not failed:  # as while Redis restarts
            failed = True
            raise RedisConnectionError("Connection closed by server.")
        return await read(*args, **kwargs)

    monkeypatch.setattr(real_redis, "xreadgroup", unreachable_once)
    projector = Projector(real_redis, pool, keys, consumer="p")
    task = asyncio.create_task(projector.run())
    for batch in story():
        await real_redis.xadd(keys.shard(0).events, {"e": codec.encode_events(batch)})

    async def projected() -> bool:
        return await _projected_version(pool, DID) == 3

    await wait_until(projected)
    projector.stop()
    await task
    assert failed


async def test_a_shard_whose_projection_fails_otherwise_ends_the_run_with_its_error(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not an outage it waits out: the process must exit and be restarted. One shard's
    projection once ended so, silently, while the process and the other shards went on."""
    keys = KeySpace(key_prefix, shards=3)
    read = real_redis.xreadgroup
    broken = keys.shard(1).events

    async def fails_on_one_shard(group: Any, consumer: Any, streams: Any, **kwargs: Any) -> Any:
        if broken in streams:
            raise LookupError("not an outage")
        return await read(group, consumer, streams, **kwargs)

    monkeypatch.setattr(real_redis, "xreadgroup", fails_on_one_shard)
    projector = Projector(real_redis, pool, keys, consumer="p")
    with pytest.raises(LookupError, match="not an outage"):
        await asyncio.wait_for(projector.run(), timeout=10)


async def test_the_projector_makes_its_group_again_when_redis_lost_it(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    """After Redis restarted empty the projector once logged NOGROUP every second for ever."""
    keys = KeySpace(key_prefix)
    stream = keys.shard(0).events
    projector = Projector(real_redis, pool, keys, consumer="p")
    task = asyncio.create_task(projector.run())
    first, *rest = story()
    await real_redis.xadd(stream, {"e": codec.encode_events(first)})
    await wait_until(lambda: _version_is(pool, 1))
    await real_redis.delete(stream)  # the stream and its group are gone, as after a restart
    for batch in rest:
        await real_redis.xadd(stream, {"e": codec.encode_events(batch)})
    await wait_until(lambda: _version_is(pool, 3))
    projector.stop()
    await task


async def _version_is(pool: asyncpg.Pool, version: int) -> bool:
    return await _projected_version(pool, DID) == version


async def test_the_read_model_agrees_with_the_write_model(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    bodies = [
        {"recipient": {"id": "u-1", "phone": "+4915112345678"}, "type": "otp",
         "data": {"code": "1", "sandbox": {"SMS": {"fail_transient": 1}}}},
        {"recipient": {"id": "u-2", "email": "a@example.com"}, "type": "order_confirmed",
         "data": {"order_id": "7", "sandbox": {"EMAIL": {"fail_permanent": "no such box"}}}},
        {"recipient": {"id": "u-3", "email": "b@example.com", "push_tokens": ["t"]},
         "type": "marketing", "data": {"subject": "s", "body": "b"}},
    ]  # fmt: skip
    ids = []
    for n, body in enumerate(bodies):
        ids += [
            d["id"] for d in (await accept(real_redis, keys, catalog, body, f"k{n}"))["deliveries"]
        ]
    projector = Projector(real_redis, pool, keys, consumer="p")
    task = asyncio.create_task(projector.run())
    async with running_worker(real_redis, keys, catalog):

        async def settled() -> bool:
            for delivery_id in ids:
                written = await state(real_redis, keys, delivery_id)
                if written and written["status"] not in {"SENT", "FAILED", "EXPIRED"}:
                    return False
                # A delivery no worker touched ended at ingest, with version 1.
                version = int(written["version"]) if written else 1
                if await _projected_version(pool, delivery_id) != version:
                    return False
            return True

        await wait_until(settled, within=20)
    projector.stop()
    await task
    async with pool.acquire() as connection:
        rows = {str(r["id"]): r for r in await connection.fetch("SELECT * FROM delivery")}
    for delivery_id in ids:
        written = await state(real_redis, keys, delivery_id)
        row = rows[delivery_id]
        if written:  # touched by a worker: its hash is the write model
            assert row["status"] == written["status"]
            assert row["attempts"] == int(written["attempts"])
            assert row["version"] == int(written["version"])
        else:  # ended at ingest (suppressed): the record's status
            assert row["status"] in {"SUPPRESSED", "EXPIRED"}
    statuses = sorted(row["status"] for row in rows.values())
    assert statuses.count("SENT") >= 2
    assert "FAILED" in statuses


async def _projected_version(pool: asyncpg.Pool, delivery_id: str) -> int:
    async with pool.acquire() as connection:
        version = await connection.fetchval(
            "SELECT version FROM delivery WHERE id = $1", delivery_id
        )
    return int(version or 0)


async def test_a_batch_is_read_in_several_reads_up_to_its_byte_bound(
    real_redis: Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeySpace(key_prefix)
    stream = keys.shard(0).events
    await real_redis.xgroup_create(stream, PROJECTOR_GROUP, id="0", mkstream=True)
    entry = {codec.EVENT_FIELD: b"[" + b" " * 98 + b"]"}  # 100 bytes
    for number in range(5):
        await real_redis.xadd(stream, entry, id=f"{number + 1}-0")
    projector = Projector(real_redis, None, keys, consumer="p")  # type: ignore[arg-type]
    monkeypatch.setattr(projector_module, "READ_COUNT", 2)

    monkeypatch.setattr(projector_module, "BATCH_BYTES", 250)  # reached by the second read
    first = await projector._read(stream, ">")
    assert [entry_id for entry_id, _ in first] == [b"1-0", b"2-0", b"3-0", b"4-0"]
    monkeypatch.setattr(projector_module, "BATCH_BYTES", 10_000)
    assert [entry_id for entry_id, _ in await projector._read(stream, ">")] == [b"5-0"]
    # Unacknowledged, they are this consumer's pending entries: read again in order from "0".
    again = await projector._read(stream, "0")
    assert [entry_id for entry_id, _ in again] == [b"1-0", b"2-0", b"3-0", b"4-0", b"5-0"]


async def test_the_next_batch_is_read_while_one_is_written_and_order_is_kept(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeySpace(key_prefix)
    stream = keys.shard(0).events
    monkeypatch.setattr(projector_module, "READ_COUNT", 1)
    monkeypatch.setattr(projector_module, "BATCH_BYTES", 1)  # one entry per batch
    written: list[str] = []
    writing = 0
    reads_while_writing = 0
    original_apply, original_read = rows_module.apply, real_redis.xreadgroup

    async def slow_apply(pool: asyncpg.Pool, stream: str, rows: Any) -> None:
        nonlocal writing
        writing += 1
        assert writing == 1, "two batches written at once"
        await asyncio.sleep(0.05)
        await original_apply(pool, stream, rows)
        written.append(rows.last_id)
        writing -= 1

    async def read(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads_while_writing
        reply = await original_read(*args, **kwargs)
        reads_while_writing += writing  # a batch was being written when this read came back
        return reply

    monkeypatch.setattr(rows_module, "apply", slow_apply)
    monkeypatch.setattr(real_redis, "xreadgroup", read)
    for n, batch in enumerate(story()):
        await real_redis.xadd(stream, {"e": codec.encode_events(batch)}, id=f"{n + 1}-0")
    projector = Projector(real_redis, pool, keys, consumer="p")
    task = asyncio.create_task(projector.run())

    async def drained() -> bool:
        return (
            len(written) == 3
            and (await real_redis.xpending(stream, PROJECTOR_GROUP))["pending"] == 0
        )

    await wait_until(drained)
    projector.stop()
    await task
    assert written == ["1-0", "2-0", "3-0"]
    assert reads_while_writing >= 2
    assert await _projected_version(pool, DID) == 3


def otp(n: int) -> dict[str, object]:
    return {"recipient": {"id": f"u-{n}", "phone": "+4915112345678"}, "type": "otp",
            "data": {"code": str(n)}}  # fmt: skip


@pytest.mark.timeout(120)
async def test_a_postgres_restart_during_load_is_caught_up(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    with postgres_server() as server:
        url = server.url.rsplit("/", 1)[0] + "/clarion"
        pool = await connect(url)
        projector = Projector(real_redis, pool, keys, consumer="p")
        task = asyncio.create_task(projector.run())
        accepted = [await accept(real_redis, keys, catalog, otp(n), f"a{n}") for n in range(50)]
        server.stop("immediate")  # a crash, mid-load
        # Ingest does not depend on the read model.
        accepted += [await accept(real_redis, keys, catalog, otp(n), f"b{n}") for n in range(50)]
        await asyncio.sleep(1.5)  # the projector keeps failing and backing off meanwhile
        server.start()
        accepted += [await accept(real_redis, keys, catalog, otp(n), f"c{n}") for n in range(50)]

        async def caught_up() -> bool:
            try:
                async with pool.acquire() as connection:
                    count = await connection.fetchval("SELECT count(*) FROM notification")
            except Exception:  # the pool reconnects after the restart
                return False
            return int(count) == len(accepted)

        await wait_until(caught_up, within=60)
        projector.stop()
        await task
        async with pool.acquire() as connection:
            ids = {str(r["id"]) for r in await connection.fetch("SELECT id FROM notification")}
            history = await connection.fetchval("SELECT count(*) FROM delivery_event")
        await pool.close()
    assert ids == {answer["id"] for answer in accepted}
    assert history == 2 * len(accepted)  # NotificationAccepted + DeliveryQueued, once each
    assert (await real_redis.xpending(keys.shard(0).events, PROJECTOR_GROUP))["pending"] == 0
