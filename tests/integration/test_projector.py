"""The projector against real Redis and PostgreSQL: idempotent, ordered, crash-safe."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

import projections.projector as projector_module
import projections.rows as rows_module
from projections.database import connect
from projections.projector import Projector
from projections.rows import apply, rows_of, write_rows
from streams import codec
from streams.consumer_groups import PROJECTOR_GROUP
from streams.events import (
    DeliveryAttemptFailed,
    DeliveryQueued,
    DeliverySent,
    Event,
    NotificationAccepted,
)
from streams.keys import KeySpace
from tests.integration.delivery_support import (
    accept,
    fast_catalog,
    running_worker,
    state,
    wait_until,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NID = "01a22000-0000-7000-8000-000000000000"
DID = "01a22000-0000-7000-8000-000000000001"


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await connect(database_url)
    yield pool
    await pool.close()


def story() -> list[list[Event]]:
    """One notification's entries: accepted, a failed attempt, then sent."""
    return [
        [
            NotificationAccepted(
                at=T0, notification_id=NID, producer="shop", idempotency_key="k",
                notification_type="otp", priority="HIGH", recipient_id="u-1", locale="en",
                expires_at=T0 + timedelta(minutes=5), delivery_ids=[DID],
            ),
            DeliveryQueued(at=T0, notification_id=NID, delivery_id=DID, version=1,
                           channel="SMS", priority="HIGH"),
        ],
        [
            DeliveryAttemptFailed(at=T0 + timedelta(seconds=1), notification_id=NID,
                                  delivery_id=DID, version=2, attempt=1,
                                  error_class="TRANSIENT", error="timeout"),
        ],
        [
            DeliverySent(at=T0 + timedelta(seconds=3), notification_id=NID, delivery_id=DID,
                         version=3, attempt=2, provider="sandbox", provider_message_id="m-1"),
        ],
    ]  # fmt: skip


def entries(events: list[list[Event]], first: int = 1) -> list[tuple[str, bytes]]:
    return [(f"{first + n}-0", codec.encode_events(batch)) for n, batch in enumerate(events)]


async def snapshot(pool: asyncpg.Pool) -> dict[str, list[Any]]:
    async with pool.acquire() as connection:
        return {
            table: [
                tuple(row) for row in await connection.fetch(f"SELECT * FROM {table} ORDER BY 1")
            ]
            for table in ("notification", "delivery", "delivery_event")
        }


async def test_projecting_the_same_events_twice_leaves_identical_rows(
    pool: asyncpg.Pool,
) -> None:
    rows = rows_of(0, entries(story()))
    await apply(pool, "s0", rows)
    once = await snapshot(pool)
    await apply(pool, "s0", rows)
    assert await snapshot(pool) == once
    assert len(once["delivery"]) == 1
    assert len(once["delivery_event"]) == 4


async def test_a_batch_partly_projected_before_writes_each_event_once(
    pool: asyncpg.Pool,
) -> None:
    accepted, failed, sent = entries(story())
    await apply(pool, "s0", rows_of(0, [accepted]))
    # The copy straight into delivery_event meets the first entry's events and fails; the
    # batch is written again the idempotent way.
    await apply(pool, "s0", rows_of(0, [accepted, failed, sent]))
    async with pool.acquire() as connection:
        history = await connection.fetch("SELECT event_id FROM delivery_event ORDER BY 1")
        row = await connection.fetchrow("SELECT status, version FROM delivery WHERE id = $1", DID)
        checkpoint = await connection.fetchval("SELECT last_id FROM projection_checkpoint")
    assert [r["event_id"] for r in history] == ["0-1-0-0", "0-1-0-1", "0-2-0-0", "0-3-0-0"]
    assert (row["status"], row["version"]) == ("SENT", 3)
    assert checkpoint == "3-0"


async def test_new_events_are_copied_straight_into_the_history(pool: asyncpg.Pool) -> None:
    rows = rows_of(0, entries(story()))
    async with pool.acquire() as connection, connection.transaction():
        await write_rows(connection, rows, events_may_repeat=False)
    async with pool.acquire() as connection:
        history = await connection.fetch(
            "SELECT event_id, type, delivery_id, version, body FROM delivery_event ORDER BY 1"
        )
    assert [(r["event_id"], r["type"], r["version"]) for r in history] == [
        ("0-1-0-0", "NotificationAccepted", None),
        ("0-1-0-1", "DeliveryQueued", 1),
        ("0-2-0-0", "DeliveryAttemptFailed", 2),
        ("0-3-0-0", "DeliverySent", 3),
    ]
    assert str(history[3]["delivery_id"]) == DID
    assert '"provider_message_id": "m-1"' in history[3]["body"]


async def test_reordered_and_repeated_events_never_move_a_delivery_backwards(
    pool: asyncpg.Pool,
) -> None:
    accepted, failed, sent = entries(story())
    # The newest change first, then the older ones, then the newest again.
    for batch in ([accepted], [sent], [failed], [accepted, failed, sent]):
        await apply(pool, "s0", rows_of(0, batch))
    async with pool.acquire() as connection:
        row = await connection.fetchrow("SELECT * FROM delivery WHERE id = $1", DID)
    assert row["status"] == "SENT"
    assert row["version"] == 3
    assert row["attempts"] == 2
    assert row["provider_message_id"] == "m-1"
    assert row["producer"] == "shop"
    assert row["notification_type"] == "otp"
    async with pool.acquire() as connection:
        history = await connection.fetchval("SELECT count(*) FROM delivery_event")
    assert history == 4  # the skipped older change is still in the history, once


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
