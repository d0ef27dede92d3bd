"""Redis memory per accepted notification in steady state, by key kind.

Run from anywhere with the project's virtualenv (it needs Redis and PostgreSQL)::

    .venv/bin/python bench/memory.py             # 20,000 notifications
    .venv/bin/python bench/memory.py --count 2000

Notifications (``order_confirmed`` with an email address and one push token: EMAIL, PUSH
and IN_APP, three deliveries each) are ingested through ``app.ingest.ingestor.Ingestor``, the
path the HTTP API takes, while a delivery worker in this process sends them to a zero-latency
sandbox and the projector (``projections.projector``, as the projector process runs it, into
a throwaway PostgreSQL database) projects their events, which lets go of the ended
deliveries' states (``streams.delivery.state_release``). When everything is delivered and projected,
``MEMORY USAGE`` (every key, ``SAMPLES 0``) and the time to live of every key are summed per
key kind; then the streams are trimmed as the retention would once their entries are older
than it, and measured again.

What a deployment holds in steady state follows from how long each kind lives: a kind whose
keys expire lives as long as the longest time to live found among them (idempotency and
notification records ``CLARION_IDEMPOTENCY_TTL``, 24 h; a projected delivery state
``CLARION_PROJECTED_STATE_RETENTION``, 5 min), stream entries ``CLARION_STREAM_RETENTION``
(1 h) after every group is done with them. The figure to hold against the target is the
steady state divided by a day's notifications: bytes of Redis per notification of daily
volume. The sandbox's own keys are a stand-in provider's and are reported apart, and so is
the inbox (IN_APP goes to it, as by default): it is the recipients' mailbox, the newest
``keep`` messages of each recipient for ``keep_days``, and grows with the recipients, not
with the notifications in flight; its bytes per message are reported.

All keys live under a random ``bench-<hex>`` prefix and are deleted at the end, as is the
database; the result is printed and written to ``bench/results/memory-<UTC timestamp>.json``,
which replaces the older memory results there.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tempfile
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import redis
import redis.asyncio as aredis
import uvloop

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.catalog import load_catalog
from app.ingest.requests import NotificationRequest
from app.logging import configure_logging
from app.settings import Settings
from bench.harness import (
    REPO,
    create_database,
    delete_prefix,
    drop_database,
    format_table,
    group_done,
    in_process,
    machine_info,
    print_problems,
    remaining_work,
    unlimited_catalog,
    work_state,
    write_result,
)
from projections.database import connect as connect_database
from projections.projector import Projector
from streams.core.consumer_groups import EVENTS_GROUPS, PROJECTOR_GROUP
from streams.core.keys import KeySpace
from streams.core.retention import StreamRetention, policies, trim_all

REDIS_URL = os.environ.get("CLARION_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
CHUNK = 500  # notifications per accept_many call
DAY_S = 86400
# The seeds' volume: 50 million notifications a day (about 579 a second on average).
DAILY_VOLUME = 50_000_000
RATE = DAILY_VOLUME / DAY_S
TARGET_BYTES = 1024  # of Redis per notification of daily volume, in steady state
SANDBOX = "sandbox (provider stand-in)"
INBOX, INBOX_FEED = "inbox", "inbox feed"
APART = frozenset({SANDBOX, INBOX, INBOX_FEED})  # kinds not held against the target (above)


def body(i: int) -> NotificationRequest:
    return msgspec.convert(
        {
            "recipient": {
                "id": f"user-{i}",
                "email": f"user{i}@example.com",
                "push_tokens": [f"token-{i:08d}-0123456789abcdef0123456789abcdef"],
            },
            "type": "order_confirmed",
            "data": {"order_id": f"A-{i}"},
        },
        NotificationRequest,
    )


def kind_of(key: str, prefix: str) -> str:
    """The kind of a key: ``idem``, ``ntf``, ``dlv``, ``events``, ``work:normal``, …"""
    rest = key.removeprefix(prefix + ":")
    if rest.startswith("sandbox:") or "{" + prefix + ":sandbox:sent}" in rest:
        return SANDBOX
    parts = rest.split(":")
    if parts[0].startswith("{s"):
        name = parts[1]
        if name == "inbox":
            return INBOX_FEED if parts[-1] == "feed" else INBOX
        return f"work:{parts[2]}" if name == "work" else name
    return parts[0]


async def memory_by_kind(client: aredis.Redis, prefix: str) -> dict[str, dict[str, int]]:
    """Keys, bytes (MEMORY USAGE, SAMPLES 0) and the longest time to live (s; 0 when none
    expires) per kind of key under ``prefix``."""
    found: dict[str, dict[str, int]] = defaultdict(lambda: {"keys": 0, "bytes": 0, "ttl_s": 0})
    batch: list[str] = []

    async def measure() -> None:
        pipe = client.pipeline(transaction=False)
        for key in batch:
            pipe.memory_usage(key, samples=0)
            pipe.pttl(key)
        replies = await pipe.execute()
        for key, size, ttl_ms in zip(batch, replies[::2], replies[1::2], strict=True):
            kind = found[kind_of(key, prefix)]
            kind["keys"] += 1
            kind["bytes"] += int(size or 0)
            kind["ttl_s"] = max(kind["ttl_s"], -(-int(ttl_ms) // 1000) if ttl_ms > 0 else 0)
        batch.clear()

    async for raw in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(raw.decode())
        if len(batch) >= 1000:
            await measure()
    await measure()
    return dict(found)


async def project(
    client: aredis.Redis, keys: KeySpace, pool: asyncpg.Pool, settings: Settings,
    until: asyncio.Event,
) -> None:  # fmt: skip
    """Run the projector until ``until`` is set and it projected everything. Every other
    group of ``events`` (status webhooks, with no producer's webhook configured) has passed
    every entry at the end, so retention may trim them."""
    stream = keys.shard(0).events
    for group in EVENTS_GROUPS:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
    projector = Projector(
        client, pool, keys, consumer="bench",
        projected_state_retention_ms=settings.projected_state_retention_seconds * 1000,
    )  # fmt: skip
    running = asyncio.create_task(projector.run())
    await until.wait()
    while not await group_done(client, stream):  # noqa: ASYNC110 - state in Redis: poll it
        await asyncio.sleep(0.1)
    projector.stop()
    await running
    for group in EVENTS_GROUPS:
        if group != PROJECTOR_GROUP:
            await client.xgroup_setid(stream, group, "$")


async def settled(client: aredis.Redis, keys: KeySpace) -> bool:
    """Every work entry acknowledged, nothing queued for a work stream or waiting in
    ``delayed``."""
    return remaining_work(await work_state(client, keys)) == 0


async def run(count: int, prefix: str) -> dict[str, Any]:
    database = await create_database()
    try:
        pool = await connect_database(database.url, max_size=4)
        try:
            return await measure(count, prefix, pool)
        finally:
            await pool.close()
    finally:
        await drop_database(database)


async def measure(count: int, prefix: str, pool: asyncpg.Pool) -> dict[str, Any]:
    client = aredis.Redis.from_url(REDIS_URL)
    keys = KeySpace(prefix)
    settings = Settings()
    with tempfile.TemporaryDirectory() as directory:
        catalog_path = Path(directory) / "clarion.toml"
        unlimited_catalog(REPO / "clarion.toml", catalog_path, inbox=True)
        catalog = load_catalog(catalog_path)
    ingestor, worker = in_process(client, keys, catalog, settings.idempotency_ttl_seconds)
    done_accepting = asyncio.Event()
    used_before = (await client.info("memory"))["used_memory"]
    projecting = asyncio.create_task(project(client, keys, pool, settings, done_accepting))
    working = asyncio.create_task(worker.run())
    deliveries = 0
    for start in range(0, count, CHUNK):
        entries = [(f"mem-{i}", body(i)) for i in range(start, min(count, start + CHUNK))]
        for outcome in await ingestor.ingest_many("bench", entries):
            if outcome.error is not None:
                raise RuntimeError(f"not accepted: {outcome.error!r}")
            deliveries += len(msgspec.json.decode(outcome.response)["deliveries"])
    while not await settled(client, keys):  # noqa: ASYNC110 - state in Redis: poll it
        await asyncio.sleep(0.1)
    done_accepting.set()
    await projecting
    worker.stop()
    await working
    used_after = (await client.info("memory"))["used_memory"]
    events_entries = await client.xlen(keys.shard(0).events)
    within = await memory_by_kind(client, prefix)
    # Once the entries are older than the retention: trim as the projector process would.
    aged = [
        StreamRetention(policy.stream, 0, policy.groups)
        for policy in policies(
            keys,
            stream_retention_ms=0,
            dlq_retention_ms=settings.dlq_retention_seconds * 1000,
        )
    ]
    trimmed = sum(result.removed for result in await trim_all(client, aged))
    after_trim = await memory_by_kind(client, prefix)
    projected_rows = await pool.fetchval("SELECT count(*) FROM delivery")
    await client.aclose()
    return {
        "notifications": count,
        "deliveries": deliveries,
        "deliveries_projected": projected_rows,
        "events_entries": events_entries,
        "stream_entries_trimmed": trimmed,
        "used_memory_delta_bytes": used_after - used_before,
        "within_retention": within,
        "after_trim": after_trim,
        "settings_s": {
            "idempotency_ttl": settings.idempotency_ttl_seconds,
            "delivery_state_retention": settings.delivery_state_retention_seconds,
            "projected_state_retention": settings.projected_state_retention_seconds,
            "stream_retention": settings.stream_retention_seconds,
        },
    }


def steady_state(result: dict[str, Any], rate: float) -> dict[str, float]:
    """Bytes held at ``rate`` notifications/s, per kind: what a notification leaves of it
    times how long that lives (its keys' longest time to live; a stream's retention)."""
    count, within = result["notifications"], result["within_retention"]
    streams_s = result["settings_s"]["stream_retention"]
    held: dict[str, float] = {}
    for kind, size in within.items():
        if kind in APART:
            continue
        lifetime = size["ttl_s"] or streams_s
        held[kind] = size["bytes"] / count * rate * lifetime
    return held


def per_daily_notification(held: dict[str, float], rate: float) -> float:
    """Bytes of Redis in steady state per notification of a day's volume."""
    return sum(held.values()) / (rate * DAY_S)


def report(result: dict[str, Any]) -> None:
    count = result["notifications"]
    rows = []
    for kind in sorted(result["within_retention"]):
        size = result["within_retention"][kind]
        trimmed = result["after_trim"].get(kind, {"bytes": 0})
        rows.append(
            [
                kind,
                f"{size['keys']:,}",
                f"{size['bytes'] / count:,.0f}",
                f"{trimmed['bytes'] / count:,.0f}",
                f"{size['ttl_s']:,}" if size["ttl_s"] else "-",
            ]
        )
    print(f"{count:,} notifications, {result['deliveries']:,} deliveries "
          f"({result['deliveries_projected']:,} projected)")  # fmt: skip
    header = ["key kind", "keys", "bytes/notification", "after trim", "longest ttl (s)"]
    print(format_table(header, rows))
    print(
        f"used_memory grew by {result['used_memory_delta_bytes'] / count:,.0f} bytes/notification"
    )
    held = steady_state(result, RATE)
    print(
        f"steady state at {DAILY_VOLUME:,} notifications a day ({RATE:.0f}/s) with the "
        "default settings:"
    )
    for kind, size in sorted(held.items()):
        print(f"  {kind:<14} {size / 2**30:8.3f} GiB")
    print(f"  {'total':<14} {sum(held.values()) / 2**30:8.3f} GiB")
    per = per_daily_notification(held, RATE)
    print(f"bytes per notification of daily volume: {per:,.0f} (target <= {TARGET_BYTES:,})")
    for kind in (INBOX, INBOX_FEED):
        size = result["within_retention"].get(kind)
        if size:
            print(f"{kind} (apart): {size['bytes'] / count:,.0f} bytes per message (one message "
                  f"per recipient), for up to {size['ttl_s']:,} s")  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="notifications to accept")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    configure_logging("console", "WARNING")
    started = datetime.now(UTC)
    prefix = f"bench-{secrets.token_hex(6)}"
    sync = redis.Redis.from_url(REDIS_URL)
    problems: list[str] = []
    try:
        result = uvloop.run(run(args.count, prefix))
    except Exception as error:  # report, clean up, fail the run
        problems.append(f"{type(error).__name__}: {error}")
        result = {}
    finally:
        delete_prefix(sync, prefix)
    if result:
        count = result["notifications"]
        result["bytes_per_notification_by_kind"] = {
            kind: round(size["bytes"] / count, 1)
            for kind, size in sorted(result["within_retention"].items())
        }
        held = steady_state(result, RATE)
        result["steady_state_at_50m_per_day"] = {
            "notifications_per_s": round(RATE, 1),
            "bytes_by_kind": {kind: round(size) for kind, size in sorted(held.items())},
            "total_bytes": round(sum(held.values())),
        }
        per = result["bytes_per_daily_notification"] = per_daily_notification(held, RATE)
        result["targets"] = {"bytes_per_daily_notification": TARGET_BYTES}
        result["pass"] = {"bytes_per_daily_notification": per <= TARGET_BYTES}
        result["machine"] = machine_info(sync)
        result["started"] = started.isoformat()
        report(result)
        write_result("memory", result, started)
    print_problems(problems)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
