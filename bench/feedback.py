"""Feedback benchmark: provider callbacks taken by the API (signature verified) and applied to
their deliveries by the projector process, on the same two cores.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/feedback.py                       # 20,000 receipts, one per callback
    .venv/bin/python bench/feedback.py --quick               # 4,000
    .venv/bin/python bench/feedback.py --per-callback 100    # 100 receipts in each callback

It starts the API (``clarion api``, one uvicorn worker: a second one only adds contention on two
cores), one delivery worker and the projector
(``clarion projector``, which matches and applies feedback) on a fresh key prefix and database,
with the shipped catalog whose sandbox provider takes feedback signed with a Standard Webhooks
secret (``feedback_secret_env``) and has no rate limit. It sends N notifications (one EMAIL
each) through the sandbox and waits until the read model has them SENT, with the sandbox's
message ids. Then, timed:

- callbacks: one signed ``delivered`` receipt per delivery, by default each in a callback of
  its own (Twilio and most providers post one receipt per request), with ``--per-callback K``
  K in each (a Standard Webhooks array, as SendGrid batches its events), from 64 keep-alive
  connections of a lean client in this process (``bench/http_load.py``: requests signed
  before the clock starts); every answer must be 200. Callbacks/s and receipts/s run from the
  first request to the last answer.
- applied: receipts per second from the first request until the read model shows every
  delivery DELIVERED.

Targets on two cores (the load generator shares them): 5,000 callbacks/s taken and 5,000/s
applied. CPU seconds of each process group are reported per receipt. The result is printed
and written to ``bench/results/feedback-<UTC timestamp>.json`` (``feedback_batched-…`` with
``--per-callback`` above 1).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import redis
import uvloop

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    BATCH_SIZE,
    HEALTH_PATH,
    REPO,
    BenchError,
    add_redis_url,
    api_client,
    batch_pieces,
    clarion_executable,
    cpu_snapshot,
    create_database,
    delete_prefix,
    drop_database,
    free_port,
    log_findings,
    post_batches,
    print_problems,
    redis_pid,
    result_head,
    running,
    service_env,
    unlimited_catalog,
    wait_healthy,
    write_result,
)
from bench.http_load import request_bytes, send_all

CALLBACKS = 20_000
QUICK_CALLBACKS = 4_000
CONNECTIONS = 64
TARGET_PER_S = 5_000
SECRET = "whsec_" + base64.b64encode(b"clarion-bench-feedback-secret").decode()


def catalog(scratch: Path) -> Path:
    """The shipped catalog, without rate limits, its sandbox taking signed feedback."""
    path = scratch / "feedback.toml"
    unlimited_catalog(REPO / "clarion.toml", path)
    text = path.read_text()
    marker = 'kind = "sandbox"\n'
    assert marker in text, "clarion.toml changed: update this benchmark"
    path.write_text(text.replace(marker, marker + 'feedback_secret_env = "BENCH_FEEDBACK"\n', 1))
    return path


def order(i: int) -> bytes:
    return (
        f'-{i}", "recipient": {{"id": "u-{i}", "email": "user-{i}@example.com"}}, '
        f'"type": "order_confirmed", "channels": ["EMAIL"], "data": {{"order_id": "A-{i}"}}}}'
    ).encode()


def signed(message_ids: list[str], number: int) -> tuple[bytes, dict[str, str]]:
    """One Standard Webhooks callback saying the messages were delivered (one: an object,
    more: an array)."""
    events = [{"message_id": message_id, "feedback": "delivered"} for message_id in message_ids]
    body = json.dumps(events if len(events) > 1 else events[0]).encode()
    webhook_id, timestamp = f"bench-{number}", str(int(time.time()))
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    mac = hmac.digest(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256)
    headers = {"webhook-id": webhook_id, "webhook-timestamp": timestamp,
               "webhook-signature": "v1," + base64.b64encode(mac).decode(),
               "content-type": "application/json"}  # fmt: skip
    return body, headers


async def sent_messages(pool: asyncpg.Pool, count: int, within_s: float) -> list[str]:
    """The provider message ids of ``count`` SENT deliveries, once the read model has them."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        rows = await pool.fetch(
            "SELECT provider_message_id FROM delivery WHERE status = 'SENT'"
            " AND provider_message_id IS NOT NULL"
        )
        if len(rows) >= count:
            return [row[0] for row in rows]
        await asyncio.sleep(0.5)
    raise BenchError(f"fewer than {count} deliveries SENT in the read model after {within_s} s")


async def send_callbacks(
    base_url: str, messages: list[str], per_callback: int
) -> tuple[float, list[int]]:
    """POST the receipts, ``per_callback`` in each callback, from ``CONNECTIONS``
    connections; elapsed s, statuses."""
    address = urlsplit(base_url)
    host, port = address.hostname or "127.0.0.1", address.port or 80
    requests = [
        request_bytes(
            address.netloc, "/v1/feedback/sandbox", *signed(messages[n : n + per_callback], n)
        )
        for n in range(0, len(messages), per_callback)
    ]
    elapsed, statuses = await send_all(host, port, requests, CONNECTIONS)
    return elapsed, list(statuses.elements())


async def delivered_count(pool: asyncpg.Pool) -> int:
    value = await pool.fetchval("SELECT count(*) FROM delivery WHERE status = 'DELIVERED'")
    return int(value)


async def measure(
    base_url: str, database_url: str, prefix: str, count: int, per_callback: int, cpu: Any
) -> dict[str, Any]:
    """Send and wait; ``cpu()`` is called when the callbacks start and when all are applied."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        async with api_client(base_url, 2) as api:
            pieces = batch_pieces(BATCH_SIZE, order)
            ingested = await post_batches(api, pieces, count // BATCH_SIZE, prefix, 2)
        messages = await sent_messages(pool, count, within_s=max(60.0, count / 200))
        before = cpu()
        started = time.perf_counter()
        elapsed, statuses = await send_callbacks(base_url, messages, per_callback)
        while await delivered_count(pool) < count:
            if time.perf_counter() - started > max(60.0, count / 100):
                break
            await asyncio.sleep(0.05)
        applied_s = time.perf_counter() - started
        used = cpu().used(before)
        delivered = await delivered_count(pool)
    finally:
        await pool.close()
    answered = {status: statuses.count(status) for status in sorted(set(statuses))}
    return {
        "notifications": ingested.notifications,
        "receipts": len(messages),
        "per_callback": per_callback,
        "callbacks": len(statuses),
        "answers": answered,
        "callbacks_per_s": round(len(statuses) / elapsed, 1),
        "receipts_per_s": round(len(messages) / elapsed, 1),
        "delivered": delivered,
        "applied_per_s": round(delivered / applied_s, 1),
        "callbacks_s": round(elapsed, 3),
        "applied_s": round(applied_s, 3),
        "cpu_s": used,
    }


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    prefix = f"bench-{secrets.token_hex(6)}"
    database = asyncio.run(create_database())
    port = free_port()
    env = service_env(prefix, args.redis_url, port, catalog(scratch))
    env |= {"CLARION_DATABASE_URL": database.url, "BENCH_FEEDBACK": SECRET}
    clarion = str(clarion_executable())
    logs = {name: scratch / f"{name}.log" for name in ("api", "worker", "projector")}
    client = redis.Redis.from_url(args.redis_url)
    try:
        with ExitStack() as stack:
            api = stack.enter_context(running([clarion, "api", "--workers", "1"], env, logs["api"]))
            worker = stack.enter_context(
                running([clarion, "worker", "--slot", "0"], env, logs["worker"])
            )
            projector = stack.enter_context(running([clarion, "projector"], env, logs["projector"]))
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(api, base_url + HEALTH_PATH, logs["api"])
            groups = {"api": [api.pid], "worker": [worker.pid], "projector": [projector.pid]}
            server = redis_pid(args.redis_url)
            figures = uvloop.run(
                measure(
                    base_url, database.url, prefix, args.callbacks, args.per_callback,
                    lambda: cpu_snapshot(groups, server),
                )
            )  # fmt: skip
    finally:
        delete_prefix(client, prefix)
        client.close()
        asyncio.run(drop_database(database))
    figures["logs"] = {name: log_findings(path) for name, path in logs.items()}
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--callbacks", type=int, default=CALLBACKS, help="receipts in all")
    parser.add_argument("--quick", action="store_true", help=f"--callbacks {QUICK_CALLBACKS}")
    parser.add_argument("--per-callback", type=int, default=1, help="receipts in each callback")
    add_redis_url(parser, "the services")
    args = parser.parse_args()
    if args.quick:
        args.callbacks = QUICK_CALLBACKS
    if not 1 <= args.per_callback <= BATCH_SIZE:
        parser.error(f"--per-callback: 1 to {BATCH_SIZE}")
    args.callbacks = max(BATCH_SIZE, args.callbacks // BATCH_SIZE * BATCH_SIZE)
    started = datetime.now(UTC)
    client = redis.Redis.from_url(args.redis_url)
    result: dict[str, Any] = {**result_head("feedback", started, client), "problems": []}
    client.close()
    with tempfile.TemporaryDirectory(prefix="clarion-bench-") as scratch:
        figures = run(args, Path(scratch))
    result |= figures
    result["targets"] = {"callbacks_per_s": TARGET_PER_S, "applied_per_s": TARGET_PER_S}
    if figures["answers"] != {200: figures["callbacks"]}:
        result["problems"].append(f"answers were {figures['answers']}, not all 200")
    if figures["delivered"] != args.callbacks:
        result["problems"].append(f"{figures['delivered']} of {args.callbacks} DELIVERED")
    result["problems"] += [
        f"{name}: {found['errors']} error lines"
        for name, found in figures["logs"].items()
        if found["errors"]
    ]
    per = {g: round(s * 1e6 / max(1, figures["receipts"]), 1) for g, s in figures["cpu_s"].items()}
    result["cpu_us_per_receipt"] = per
    print(
        f"\nfeedback: {figures['receipts']:,} receipts in {figures['callbacks']:,} callbacks: "
        f"{figures['callbacks_per_s']:,.0f} callbacks/s and {figures['receipts_per_s']:,.0f} "
        f"receipts/s taken (target >= {TARGET_PER_S:,}), {figures['applied_per_s']:,.0f} "
        f"receipts/s applied (target >= {TARGET_PER_S:,}); CPU us per receipt: {per}"
    )
    write_result("feedback" if args.per_callback == 1 else "feedback_batched", result, started)
    if result["problems"]:
        print_problems(result["problems"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
