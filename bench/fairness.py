"""Fairness benchmark: one producer's LOW backlog, another producer's LOW notifications, and
HIGH notifications, all at once.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/fairness.py            # A: 200,000 LOW queued; B: 1,000 LOW
    .venv/bin/python bench/fairness.py --quick    # A: 40,000

It starts the API and two delivery workers on a fresh key prefix, with the shipped catalog
without rate limits (fairness as shipped: buffer 2000, equal weights). Producer A posts its
backlog of ``marketing`` emails (LOW) in batches of 1000 before the workers start. Once the
workers deliver A's backlog at their steady rate, producer B posts 1,000 LOW emails in one
batch, and OTPs (HIGH) go in one by one, 50 a second, until B's last email is sent.

Measured, from the sandbox's record of each send: the LOW delivery rate R while B's emails
were under way; how long B's 1,000 took from acceptance to the last one sent (T_B); what
B's share predicts,

    T_B <= t_accept + t_poll + (N_B * (w_A + w_B) / w_B + buffer) / R

(B's batch is accepted over t_accept; a full stream's feeder looks again every t_poll; its
emails move into the work stream at
w_B / (w_A + w_B) of its room, behind at most ``buffer`` items already in it); what the
same would have taken first-in-first-out, behind A's whole remaining backlog; and each
OTP's latency from acceptance to its send (p50, p99; target p99 < 100 ms). The result is
printed and written to ``bench/results/fairness-<UTC timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import redis
import uvloop
from redis import asyncio as aredis

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.delivery.feeder import FeederTiming
from bench.harness import (
    BATCH_SIZE,
    HEALTH_PATH,
    REPO,
    BenchError,
    add_redis_url,
    batch_pieces,
    clarion_executable,
    delete_prefix,
    entry_ms,
    free_port,
    id_ms,
    latency_summary,
    log_findings,
    post_batches,
    print_problems,
    result_head,
    running,
    service_env,
    unlimited_catalog,
    wait_healthy,
    write_result,
)
from streams.core.keys import KeySpace
from streams.delivery.fairness import Fairness

BACKLOG = 200_000
QUICK_BACKLOG = 40_000
B_COUNT = 1000
OTP_PER_S = 50
STEADY_SENDS = 10_000
SECRETS = {"alpha": "alpha-bench-secret", "beta": "beta-bench-secret"}
HIGH_P99_TARGET_MS = 100.0


def marketing(i: int) -> bytes:
    return (
        b'-%d", "recipient": {"id": "r-%d", "email": "r-%d@example.com"}, "type": "marketing", '
        b'"channels": ["EMAIL"], "data": {"subject": "Sale", "body": "Now"}}' % (i, i, i)
    )


def client(base_url: str, producer: str, connections: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {SECRETS[producer]}"},
        timeout=120.0,
        limits=httpx.Limits(max_connections=connections),
    )


async def sent_records(redis_url: str, keys: KeySpace) -> dict[str, int]:
    """Every delivery the sandbox sent, with when (ms)."""
    connection = aredis.Redis.from_url(redis_url)
    sent: dict[str, int] = {}
    start = "-"
    try:
        while True:
            chunk: Any = await connection.xrange(keys.sandbox_sent, start, "+", count=10_000)
            for entry_id, fields in chunk:
                if fields[b"outcome"] == b"sent":
                    sent.setdefault(fields[b"delivery_id"].decode(), entry_ms(entry_id))
            if len(chunk) < 10_000:
                return sent
            start = "(" + chunk[-1][0].decode()
    finally:
        await connection.aclose()


async def wait_sent(redis_url: str, keys: KeySpace, count: int, within_s: float) -> None:
    connection = aredis.Redis.from_url(redis_url)
    deadline = time.monotonic() + within_s
    try:
        while await connection.xlen(keys.sandbox_sent) < count:
            if time.monotonic() > deadline:
                raise BenchError(f"fewer than {count} sends within {within_s} s")
            await asyncio.sleep(0.2)
    finally:
        await connection.aclose()


async def send_otps(base_url: str, stop: asyncio.Event) -> list[tuple[str, int]]:
    """OTPs, one POST each, OTP_PER_S a second until ``stop``; (delivery id, accepted ms)."""
    sent: list[tuple[str, int]] = []
    async with client(base_url, "beta", 4) as api:
        number = 0
        while not stop.is_set():
            number += 1
            body = {"recipient": {"id": f"otp-{number}", "phone": "+4915112345678"},
                    "type": "otp", "data": {"code": str(number)}}  # fmt: skip
            answer = await api.post(
                "/v1/notifications", json=body, headers={"Idempotency-Key": f"otp-{number}"}
            )
            if answer.status_code != 202:
                raise BenchError(f"otp: {answer.status_code} {answer.text[:200]}")
            accepted = answer.json()
            for delivery in accepted["deliveries"]:
                sent.append((delivery["id"], id_ms(accepted["id"])))
            await asyncio.sleep(1 / OTP_PER_S)
    return sent


async def scenario(base_url: str, redis_url: str, keys: KeySpace) -> dict[str, Any]:
    """B's batch and the OTPs while the workers work through A's backlog."""
    stop = asyncio.Event()
    otps = asyncio.create_task(send_otps(base_url, stop))
    async with client(base_url, "beta", 1) as api:
        answer = await api.post(
            "/v1/notifications/batch", content=b"beta".join(batch_pieces(B_COUNT, marketing)),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
    if answer.status_code != 200:
        raise BenchError(f"B's batch: {answer.status_code} {answer.text[:300]}")
    results = answer.json()["results"]
    accepted_ms = min(id_ms(r["id"]) for r in results)
    accept_s = (max(id_ms(r["id"]) for r in results) - accepted_ms) / 1000
    b_ids = {d["id"] for r in results for d in r["deliveries"] if d["status"] == "QUEUED"}
    deadline = time.monotonic() + 300
    while True:
        sent = await sent_records(redis_url, keys)
        if b_ids <= sent.keys():
            break
        if time.monotonic() > deadline:
            raise BenchError(f"{len(b_ids - sent.keys())} of B's emails unsent after 300 s")
        await asyncio.sleep(0.2)
    stop.set()
    otp_deliveries = await otps
    sent = await sent_records(redis_url, keys)
    return {
        "accepted_ms": accepted_ms,
        "accept_s": accept_s,
        "b_ids": b_ids,
        "otps": otp_deliveries,
        "sent": sent,
    }


def figures(found: dict[str, Any], fairness: Fairness, backlog: int) -> dict[str, Any]:
    start, sent = found["accepted_ms"], found["sent"]
    b_done = max(sent[d] for d in found["b_ids"])
    otp_ids = {delivery_id for delivery_id, _ in found["otps"]}
    low_in_window = [ms for d, ms in sent.items() if start <= ms <= b_done and d not in otp_ids]
    window_s = max(0.001, (b_done - start) / 1000)
    rate = len(low_in_window) / window_s
    a_sent_before = sum(1 for d, ms in sent.items() if ms < start and d not in otp_ids)
    w_a, w_b = fairness.weight("alpha"), fairness.weight("beta")
    predicted_s = (
        found["accept_s"]
        + FeederTiming().full_s
        + (B_COUNT * (w_a + w_b) / w_b + fairness.buffer) / rate
    )
    fifo_s = (backlog - a_sent_before + B_COUNT) / rate
    latencies = [sent[d] - accepted for d, accepted in found["otps"] if d in sent]
    return {
        "low_rate_per_s": round(rate, 1),
        "b_seconds": round(window_s, 3),
        "b_accept_seconds": round(found["accept_s"], 3),
        "b_predicted_seconds": round(predicted_s, 3),
        "b_fifo_seconds": round(fifo_s, 3),
        "a_sent_before_b": a_sent_before,
        "weights": {"alpha": w_a, "beta": w_b},
        "buffer": fairness.buffer,
        "otps": len(found["otps"]),
        "otps_unsent": sum(1 for d, _ in found["otps"] if d not in sent),
        "high_latency_ms": latency_summary([float(ms) for ms in latencies]),
    }


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    prefix = f"bench-{secrets.token_hex(6)}"
    keys = KeySpace(prefix)
    port = free_port()
    catalog = scratch / "fairness.toml"
    unlimited_catalog(REPO / "clarion.toml", catalog)
    env = service_env(prefix, args.redis_url, port, catalog)
    env["CLARION_API_KEYS"] = ",".join(f"{p}:{s}:send" for p, s in SECRETS.items())
    clarion = str(clarion_executable())
    logs = {name: scratch / f"{name}.log" for name in ("api", "worker0", "worker1")}
    sync = redis.Redis.from_url(args.redis_url)
    try:
        with ExitStack() as stack:
            api = stack.enter_context(running([clarion, "api", "--workers", "2"], env, logs["api"]))
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(api, base_url + HEALTH_PATH, logs["api"])
            backlog = uvloop.run(post_backlog(base_url, args.backlog))
            for n in range(2):
                stack.enter_context(
                    running([clarion, "worker", "--slot", str(n)], env, logs[f"worker{n}"])
                )
            uvloop.run(wait_sent(args.redis_url, keys, STEADY_SENDS, within_s=120))
            found = uvloop.run(scenario(base_url, args.redis_url, keys))
    finally:
        delete_prefix(sync, prefix)
        sync.close()
    result = figures(found, Fairness(), backlog)
    result["backlog"] = backlog
    result["logs"] = {name: log_findings(path) for name, path in logs.items()}
    return result


async def post_backlog(base_url: str, count: int) -> int:
    async with client(base_url, "alpha", 4) as api:
        api.headers["Content-Type"] = "application/json"
        pieces = batch_pieces(BATCH_SIZE, marketing)
        ingested = await post_batches(api, pieces, count // BATCH_SIZE, "alpha", 4)
    if ingested.refused or ingested.failed_requests:
        raise BenchError(f"A's backlog: {ingested.first_problem}")
    return ingested.notifications


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backlog", type=int, default=BACKLOG, help="A's LOW notifications")
    parser.add_argument("--quick", action="store_true", help=f"--backlog {QUICK_BACKLOG}")
    add_redis_url(parser, "the services")
    args = parser.parse_args()
    if args.quick:
        args.backlog = QUICK_BACKLOG
    started = datetime.now(UTC)
    sync = redis.Redis.from_url(args.redis_url)
    result: dict[str, Any] = {**result_head("fairness", started, sync), "problems": []}
    sync.close()
    with tempfile.TemporaryDirectory(prefix="clarion-bench-") as scratch:
        result |= run(args, Path(scratch))
    if result["b_seconds"] > result["b_predicted_seconds"]:
        result["problems"].append("B took longer than its share predicts")
    if result["high_latency_ms"]["p99"] > HIGH_P99_TARGET_MS:
        result["problems"].append(f"HIGH p99 above {HIGH_P99_TARGET_MS:.0f} ms")
    if result["otps_unsent"]:
        result["problems"].append(f"{result['otps_unsent']} OTPs unsent")
    result["problems"] += [
        f"{name}: {found['errors']} error lines"
        for name, found in result["logs"].items()
        if found["errors"]
    ]
    high = result["high_latency_ms"]
    print(
        f"\nfairness: A {result['backlog']:,} LOW queued; B's {B_COUNT:,} LOW took "
        f"{result['b_seconds']} s (its share predicts <= {result['b_predicted_seconds']} s, "
        f"first-in-first-out {result['b_fifo_seconds']} s) at {result['low_rate_per_s']:,.0f} "
        f"LOW/s; HIGH p50 {high['p50']:.0f} ms, p99 {high['p99']:.0f} ms "
        f"(target < {HIGH_P99_TARGET_MS:.0f}) over {result['otps']} OTPs"
    )
    write_result("fairness", result, started)
    if result["problems"]:
        print_problems(result["problems"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
