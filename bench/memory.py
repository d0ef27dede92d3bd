"""Redis memory per accepted notification in steady state, by key kind.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/memory.py             # 20,000 notifications
    .venv/bin/python bench/memory.py --count 2000

Notifications (``order_confirmed`` with an email address and one push token: EMAIL, PUSH
and IN_APP, three deliveries each) are ingested through ``app.ingest.ingestor.Ingestor``, the
path the HTTP API takes, while a delivery worker in this process sends them to a zero-latency
sandbox. A stand-in for a caught-up projector reads and acknowledges every ``events`` entry
(no PostgreSQL needed: the projector only acknowledges). When everything is delivered and
acknowledged, ``MEMORY USAGE`` (every key, ``SAMPLES 0``) is summed per key kind and divided
by the number of notifications; then the streams are trimmed as the retention would once
their entries are older than it, and measured again.

What a deployment holds in steady state follows from how long each kind lives:
idempotency record and notification record ``CLARION_IDEMPOTENCY_TTL`` (24 h), delivery
state ``CLARION_DELIVERY_STATE_RETENTION`` (24 h) after the delivery ended, stream
entries ``CLARION_STREAM_RETENTION`` (1 h) after every group is done with them. The sandbox's
own keys are a stand-in provider's and are reported apart.

All keys live under a random ``bench-<hex>`` prefix and are deleted at the end; the result
is printed and written to ``bench/results/memory-<UTC timestamp>.json``, which replaces the
older memory results there.
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
    delete_prefix,
    format_table,
    in_process,
    machine_info,
    print_problems,
    remaining_work,
    unlimited_catalog,
    work_state,
    write_result,
)
from streams.consumer_groups import EVENTS_GROUPS, PROJECTOR_GROUP
from streams.keys import KeySpace
from streams.retention import StreamRetention, policies, trim_all

REDIS_URL = os.environ.get("CLARION_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
CHUNK = 500  # notifications per accept_many call
DAY_S = 86400


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
        return "sandbox (provider stand-in)"
    parts = rest.split(":")
    if parts[0].startswith("{s"):
        name = parts[1]
        return f"work:{parts[2]}" if name == "work" else name
    return parts[0]


async def memory_by_kind(client: aredis.Redis, prefix: str) -> dict[str, dict[str, int]]:
    """Keys and bytes (MEMORY USAGE, SAMPLES 0) per kind of key under ``prefix``."""
    found: dict[str, dict[str, int]] = defaultdict(lambda: {"keys": 0, "bytes": 0})
    batch: list[str] = []

    async def measure() -> None:
        pipe = client.pipeline(transaction=False)
        for key in batch:
            pipe.memory_usage(key, samples=0)
        for key, size in zip(batch, await pipe.execute(), strict=True):
            found[kind_of(key, prefix)]["keys"] += 1
            found[kind_of(key, prefix)]["bytes"] += int(size or 0)
        batch.clear()

    async for raw in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(raw.decode())
        if len(batch) >= 1000:
            await measure()
    await measure()
    return dict(found)


async def acknowledge_events(client: aredis.Redis, keys: KeySpace, until: asyncio.Event) -> int:
    """Caught-up readers' effect on Redis: the projector reads every events entry and
    acknowledges it; every other group of ``events`` (status webhooks, with no producer's
    webhook configured) has passed them all at the end, so retention may trim them."""
    stream = keys.shard(0).events
    for group in EVENTS_GROUPS:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
    acknowledged = 0
    while True:
        reply: Any = await client.xreadgroup(
            PROJECTOR_GROUP, "bench", {stream: ">"}, count=2000, block=50
        )
        ids = [entry_id for entry_id, _ in reply[0][1]] if reply else []
        if ids:
            acknowledged += await client.xack(stream, PROJECTOR_GROUP, *ids)
        elif until.is_set():
            for group in EVENTS_GROUPS:
                if group != PROJECTOR_GROUP:
                    await client.xgroup_setid(stream, group, "$")
            return acknowledged


async def settled(client: aredis.Redis, keys: KeySpace) -> bool:
    """Every work entry acknowledged, nothing queued for a work stream or waiting in
    ``delayed``."""
    return remaining_work(await work_state(client, keys)) == 0


async def run(count: int, prefix: str) -> dict[str, Any]:
    client = aredis.Redis.from_url(REDIS_URL)
    keys = KeySpace(prefix)
    settings = Settings()
    with tempfile.TemporaryDirectory() as directory:
        catalog_path = Path(directory) / "clarion.toml"
        unlimited_catalog(REPO / "clarion.toml", catalog_path)
        catalog = load_catalog(catalog_path)
    ingestor, worker = in_process(client, keys, catalog, settings.idempotency_ttl_seconds)
    done_accepting = asyncio.Event()
    used_before = (await client.info("memory"))["used_memory"]
    projector = asyncio.create_task(acknowledge_events(client, keys, done_accepting))
    working = asyncio.create_task(worker.run())
    deliveries = 0
    for start in range(0, count, CHUNK):
        entries = [(f"mem-{i}", body(i)) for i in range(start, min(count, start + CHUNK))]
        for outcome in await ingestor.ingest_many("bench", entries):
            if outcome.status_code != 202:
                raise RuntimeError(f"not accepted: {outcome.status_code} {outcome.detail}")
            deliveries += len(msgspec.json.decode(outcome.response)["deliveries"])
    while not await settled(client, keys):  # noqa: ASYNC110 - state in Redis: poll it
        await asyncio.sleep(0.1)
    done_accepting.set()
    acknowledged = await projector
    worker.stop()
    await working
    used_after = (await client.info("memory"))["used_memory"]
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
    await client.aclose()
    return {
        "notifications": count,
        "deliveries": deliveries,
        "events_entries_acknowledged": acknowledged,
        "stream_entries_trimmed": trimmed,
        "used_memory_delta_bytes": used_after - used_before,
        "within_retention": within,
        "after_trim": after_trim,
        "lifetimes_s": {
            "idem": settings.idempotency_ttl_seconds,
            "ntf": settings.idempotency_ttl_seconds,
            "dlv": settings.delivery_state_retention_seconds,
            "streams": settings.stream_retention_seconds,
        },
    }


def steady_state(result: dict[str, Any], rate: float) -> dict[str, float]:
    """Bytes held at ``rate`` notifications/s with the default lifetimes, per kind."""
    count, within, lifetimes = (
        result["notifications"],
        result["within_retention"],
        result["lifetimes_s"],
    )
    held: dict[str, float] = {}
    for kind, size in within.items():
        if kind.startswith("sandbox"):
            continue
        lifetime = lifetimes.get(kind, lifetimes["streams"])
        held[kind] = size["bytes"] / count * rate * lifetime
    return held


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
            ]
        )
    print(f"{count:,} notifications, {result['deliveries']:,} deliveries")
    print(format_table(["key kind", "keys", "bytes/notification", "after trim"], rows))
    print(
        f"used_memory grew by {result['used_memory_delta_bytes'] / count:,.0f} bytes/notification"
    )
    rate = 100.0
    held = steady_state(result, rate)
    print(f"steady state at {rate:.0f} notifications/s with the default lifetimes:")
    for kind, size in sorted(held.items()):
        print(f"  {kind:<14} {size / 2**30:8.2f} GiB")
    print(f"  {'total':<14} {sum(held.values()) / 2**30:8.2f} GiB")


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
        result["steady_state_bytes_at_100_per_s"] = steady_state(result, 100.0)
        result["machine"] = machine_info(sync)
        result["started"] = started.isoformat()
        report(result)
        write_result("memory", result, started)
    print_problems(problems)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
