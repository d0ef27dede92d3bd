"""Ingest benchmark: Clarion's single POST against a bare Litestar + EVALSHA app, and batches.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/ingest.py             # 10 s per measurement
    .venv/bin/python bench/ingest.py --quick     # 3 s per measurement

It measures, one after the other (the machine has few cores; two servers at once would
measure each other):

1. a bare Litestar app (``bench/bare_app.py``) doing one EVALSHA per POST, with wrk;
2. Clarion's ``POST /v1/notifications`` with the same wrk script and connections;
3. Clarion's ``POST /v1/notifications/batch`` with 1000 items per request, from httpx.

Both servers run with 2 uvicorn workers, uvloop and httptools. All Redis keys live under a
random ``bench-<hex>`` prefix and are deleted at the end. The result is printed as a table and
written to ``bench/results/ingest-<UTC timestamp>.json``, which replaces the older ingest
results there. A run that saw any answer other than 202 (or a socket error) is marked invalid
and exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
import redis

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    API_KEY,
    BATCH_PATH,
    BATCH_SIZE,
    HEALTH_PATH,
    LOG_TAIL_LINES,
    REPO,
    SINGLE_PATH,
    BenchError,
    CpuSnapshot,
    add_redis_url,
    batch_pieces,
    clarion_executable,
    cpu_snapshot,
    delete_prefix,
    format_table,
    free_port,
    ingest_item,
    log_tail,
    percentile,
    print_problems,
    redis_pid,
    result_head,
    running,
    service_env,
    wait_healthy,
    write_result,
)

WRK_SCRIPT = "bench/wrk_post.lua"  # relative to REPO, where wrk runs
WRK_MARKER = "BENCH_RESULT "  # prefix of the JSON line that wrk_post.lua's done() prints

WORKERS = 2
WRK_THREADS = 2
CONNECTIONS = 64
WARMUP_SECONDS = 1  # first requests pay for imports, pool connections and SCRIPT LOAD
BATCH_CONCURRENCY = 8

TARGET_RATIO = 0.70
TARGET_BATCH_RATE = 50_000.0


# --- wrk: single POSTs -------------------------------------------------------------------


class SocketErrors(msgspec.Struct):
    """wrk's socket-level failures: no HTTP status to judge at all."""

    connect: int
    read: int
    write: int
    timeout: int

    @property
    def total(self) -> int:
        return self.connect + self.read + self.write + self.timeout


class WrkResult(msgspec.Struct):
    """What ``wrk_post.lua`` reports for one wrk run (latencies in milliseconds)."""

    requests: int
    duration_s: float
    requests_per_s: float
    latency_mean_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    non_2xx: int
    non_202: int
    socket_errors: SocketErrors
    first_unexpected_status: int
    first_unexpected_body: str

    def problems(self, name: str) -> list[str]:
        """Why this run cannot be trusted; empty when every response was a 202."""
        found: list[str] = []
        if self.requests == 0:
            found.append(f"{name}: no request completed")
        if self.non_202:
            found.append(
                f"{name}: {self.non_202} of {self.requests} responses were not 202 "
                f"({self.non_2xx} not 2xx); first: HTTP {self.first_unexpected_status} "
                f"{self.first_unexpected_body!r}"
            )
        if self.socket_errors.total:
            found.append(f"{name}: socket errors {msgspec.to_builtins(self.socket_errors)}")
        return found


def run_wrk(base_url: str, seconds: int, tag: str) -> WrkResult:
    """Run wrk against ``base_url`` + the single POST path and parse the script's result line.

    ``tag`` makes the Idempotency-Keys of this run unique (wrk_post.lua adds thread and counter).
    """
    argv = [
        "wrk",
        f"-t{WRK_THREADS}",
        f"-c{CONNECTIONS}",
        f"-d{seconds}s",
        "--latency",
        "-s",
        WRK_SCRIPT,
        base_url + SINGLE_PATH,
        "--",
        tag,
    ]
    done = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=seconds + 60, check=False
    )
    for line in done.stdout.splitlines():
        if line.startswith(WRK_MARKER):
            return msgspec.json.decode(line.removeprefix(WRK_MARKER), type=WrkResult)
    raise BenchError(
        f"wrk printed no result (exit {done.returncode}): {done.stderr.strip() or done.stdout}"
    )


def measure_single(base_url: str, seconds: int, tag: str) -> WrkResult:
    """Warm the server up with a short wrk run, then measure for ``seconds``."""
    run_wrk(base_url, WARMUP_SECONDS, f"{tag}-warmup")
    return run_wrk(base_url, seconds, tag)


# --- httpx: batches ------------------------------------------------------------------------


class ItemResult(msgspec.Struct):
    """One entry of a batch response; ``id`` and ``deliveries`` are not needed here."""

    status_code: int
    idempotency_key: str = ""
    detail: str | None = None


class BatchReply(msgspec.Struct):
    """A batch answer: one result per item, in request order."""

    results: list[ItemResult]


@dataclass
class BatchResult:
    """Counts and latencies of the batch run (latencies in seconds, one per request)."""

    elapsed_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    accepted: int = 0  # items answered 202
    rejected: int = 0  # items answered anything else
    failed_requests: int = 0  # no answer, or a status other than 200 for the whole batch
    first_rejected: str = ""
    first_failure: str = ""
    # CPU seconds each process group used during the measured part (``cpu_snapshot``).
    cpu_s: dict[str, float] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """Why this run cannot be trusted; empty when every item was accepted."""
        found: list[str] = []
        if not self.latencies:
            found.append("clarion batch: no request completed")
        if self.rejected:
            found.append(
                f"clarion batch: {self.rejected} items were not 202; first: {self.first_rejected}"
            )
        if self.failed_requests:
            found.append(
                f"clarion batch: {self.failed_requests} requests failed; "
                f"first: {self.first_failure}"
            )
        return found

    def summary(self) -> dict[str, Any]:
        """The figures reported in the table and in the JSON file."""
        seconds = self.elapsed_s or float("inf")  # no run, no rate
        return {
            "requests": len(self.latencies),
            "elapsed_s": round(self.elapsed_s, 3),
            "notifications_accepted": self.accepted,
            "notifications_rejected": self.rejected,
            "failed_requests": self.failed_requests,
            "notifications_per_s": round(self.accepted / seconds, 1),
            "requests_per_s": round(len(self.latencies) / seconds, 2),
            "latency_p50_ms": round(percentile(self.latencies, 50) * 1000, 2),
            "latency_p99_ms": round(percentile(self.latencies, 99) * 1000, 2),
            "first_rejected_item": self.first_rejected,
            "first_failed_request": self.first_failure,
            # What a notification cost each part: the rate is the machine's cores divided by
            # the sum, since everything shares them.
            "cpu_us_per_notification": {
                group: round(seconds / self.accepted * 1e6, 1)
                for group, seconds in self.cpu_s.items()
                if self.accepted
            },
        }


def record_batch(
    result: BatchResult, response: httpx.Response, decoder: msgspec.json.Decoder[BatchReply]
) -> None:
    """Count the items of one batch answer by their status code."""
    if response.status_code != 200:
        result.failed_requests += 1
        result.first_failure = result.first_failure or (
            f"HTTP {response.status_code} {response.text[:500]!r}"
        )
        return
    for item in decoder.decode(response.content).results:
        if item.status_code == 202:
            result.accepted += 1
        else:
            result.rejected += 1
            result.first_rejected = result.first_rejected or (
                f"item {item.idempotency_key!r}: {item.status_code} {item.detail!r}"
            )


async def measure_batches(
    base_url: str, seconds: int, tag: str, cpu_of: Callable[[], CpuSnapshot] | None = None
) -> BatchResult:
    """Post 1000-item batches from ``BATCH_CONCURRENCY`` loops for ``seconds``; with
    ``cpu_of``, also the CPU each process group used meanwhile (after the warm-up)."""
    pieces = batch_pieces(BATCH_SIZE, ingest_item)
    decoder = msgspec.json.Decoder(BatchReply)
    batch_numbers = itertools.count()
    result = BatchResult()

    async def post(client: httpx.AsyncClient) -> httpx.Response:
        body = f"{tag}-b{next(batch_numbers)}".encode().join(pieces)
        return await client.post(BATCH_PATH, content=body)

    async def loop(client: httpx.AsyncClient, deadline: float) -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                response = await post(client)
            except httpx.HTTPError as error:
                result.failed_requests += 1
                result.first_failure = result.first_failure or f"no answer: {error!r}"
                return  # the server is gone or stuck; retrying would only spin
            result.latencies.append(time.perf_counter() - started)
            record_batch(result, response, decoder)

    async with httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
        timeout=60.0,
        # A new connection for each batch: the kernel then gives each to whichever server
        # worker accepts first, an idle one. Eight kept-alive connections were often split
        # 8:0 or 7:1 between the two workers, leaving a core 30 % idle and the rate at
        # 18,000/s in one run and 27,000/s in the next.
        limits=httpx.Limits(max_connections=BATCH_CONCURRENCY, max_keepalive_connections=0),
    ) as client:
        # Warm-up, not counted: one batch per connection. An error here shows up again below.
        await asyncio.gather(*(post(client) for _ in range(BATCH_CONCURRENCY)))
        before = cpu_of() if cpu_of is not None else None
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(*(loop(client, deadline) for _ in range(BATCH_CONCURRENCY)))
        result.elapsed_s = time.perf_counter() - started
        if cpu_of is not None and before is not None:
            result.cpu_s = cpu_of().used(before)
    return result


# --- servers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    url: str
    pid: int  # of the server's main process; its workers are its children


@contextmanager
def serving(argv: list[str], env: dict[str, str], port: int, log_path: Path) -> Iterator[Server]:
    """Run a server until the block ends; yields it once it is healthy."""
    with running(argv, env, log_path) as process:
        base_url = f"http://127.0.0.1:{port}"
        wait_healthy(process, base_url + HEALTH_PATH, log_path)
        yield Server(base_url, process.pid)
        if process.poll() is not None:
            raise BenchError(
                f"server exited with {process.returncode} during the run:\n" + log_tail(log_path)
            )


def clarion_command() -> list[str]:
    """The ``clarion api`` command line: the API alone, no delivery workers competing for the
    two cores (its environment: ``service_env``)."""
    return [str(clarion_executable()), "api", "--workers", str(WORKERS)]


def bare_command(env: dict[str, str], prefix: str, redis_url: str, port: int) -> list[str]:
    """The uvicorn command line of ``bench.bare_app``; sets its environment in ``env``."""
    env.update(BENCH_KEY_PREFIX=prefix, BENCH_REDIS_URL=redis_url)
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.bare_app:build",
        "--factory",
        "--workers",
        str(WORKERS),
        "--loop",
        "uvloop",
        "--http",
        "httptools",
        "--no-access-log",
        "--log-level",
        "warning",  # as quiet as Clarion's CLARION_LOG_LEVEL=WARNING
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


# --- report --------------------------------------------------------------------------------


def print_table(result: dict[str, Any]) -> None:
    """Print the measurements, the targets and any problem in a readable form."""
    params = result["parameters"]
    single = result["single"]
    batch = result["batch"]
    passed = result["pass"]
    print(
        f"\nClarion ingest benchmark: {params['duration_s']} s per run, "
        f"{params['service_workers']} workers per server, {params['cpu_count']} cores, "
        f"load average at start {result['machine']['load_average_at_start'][0]}\n"
    )
    single_rows = [
        [
            label,
            f"{run['requests_per_s']:,.0f}",
            f"{run['latency_p50_ms']:.2f}",
            f"{run['latency_p99_ms']:.2f}",
            str(run["non_202"]),
            str(sum(run["socket_errors"].values())),
        ]
        for label, run in (
            ("bare Litestar + 1 EVALSHA", single["bare"]),
            ("clarion POST /v1/notifications", single["clarion"]),
        )
    ]
    header = [f"single POST, wrk {CONNECTIONS} conns", "req/s", "p50 ms", "p99 ms", "non-202"]
    print(format_table([*header, "socket err"], single_rows) + "\n")
    batch_row = [
        "clarion POST /v1/notifications/batch",
        f"{batch['notifications_per_s']:,.0f}",
        f"{batch['requests_per_s']:.2f}",
        f"{batch['latency_p50_ms']:.1f}",
        f"{batch['latency_p99_ms']:.1f}",
        str(batch["notifications_rejected"]),
        str(batch["failed_requests"]),
    ]
    header = [f"batch x{BATCH_SIZE}, {BATCH_CONCURRENCY} concurrent", "notif/s", "req/s"]
    header += ["p50 ms", "p99 ms", "items not 202", "failed req"]
    print(format_table(header, [batch_row]))
    spent = batch.get("cpu_us_per_notification") or {}
    if spent:
        parts = ", ".join(f"{group} {us:.1f}" for group, us in spent.items())
        print(f"CPU per notification (µs): {parts}; total {sum(spent.values()):.1f}")
    print()
    target_rows = [
        [
            "single_vs_bare_ratio",
            f"{single['single_vs_bare_ratio']:.3f}",
            f">= {TARGET_RATIO:.2f}",
            "PASS" if passed["single_vs_bare_ratio"] else "FAIL",
        ],
        [
            "batch notifications/s",
            f"{batch['notifications_per_s']:,.0f}",
            f">= {TARGET_BATCH_RATE:,.0f}",
            "PASS" if passed["batch_notifications_per_s"] else "FAIL",
        ],
    ]
    print(format_table(["target", "measured", "wanted", "verdict"], target_rows) + "\n")
    for name, tail in result["server_logs"].items():
        print(f"--- {name} server log (last {LOG_TAIL_LINES} lines) ---\n{tail}\n")
    print_problems(
        result["problems"],
        "INVALID RESULT: the services answered with errors; these figures do not count.",
    )


# --- main ----------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    """The command line: ``--duration SECONDS``, ``--quick`` (3 s) and ``--redis-url``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--quick", action="store_true", help="3 s per measurement")
    add_redis_url(parser, "both servers")
    args = parser.parse_args()
    if args.quick:
        args.duration = 3
    if args.duration < 1:
        parser.error("--duration must be at least 1 second")
    return args


def run_all(seconds: int, prefix: str, redis_url: str, logs: Path) -> dict[str, Any]:
    """Bare app, then Clarion (single, then batch): never two servers at once."""
    print(f"bare Litestar + EVALSHA: wrk for {seconds} s ...", flush=True)
    env = dict(os.environ)
    port = free_port()
    bare_log = logs / "bare.log"
    with serving(bare_command(env, prefix, redis_url, port), env, port, bare_log) as server:
        bare = measure_single(server.url, seconds, f"{prefix}-bare")

    print(f"clarion single POST: wrk for {seconds} s ...", flush=True)
    port = free_port()
    env = service_env(prefix, redis_url, port, REPO / "clarion.toml")
    clarion_log = logs / "clarion.log"
    with serving(clarion_command(), env, port, clarion_log) as server:
        clarion = measure_single(server.url, seconds, f"{prefix}-single")
        print(f"clarion batch POST: httpx for {seconds} s ...", flush=True)
        redis_server = redis_pid(redis_url)

        def cpu_of() -> CpuSnapshot:
            return cpu_snapshot({"api": [server.pid]}, redis_server, postgres=False)

        batch = asyncio.run(measure_batches(server.url, seconds, f"{prefix}-batch", cpu_of))

    ratio = clarion.requests_per_s / bare.requests_per_s if bare.requests_per_s else 0.0
    problems = bare.problems("bare") + clarion.problems("clarion single") + batch.problems()
    batch_summary = batch.summary()
    return {
        "single": {
            "bare": msgspec.to_builtins(bare),
            "clarion": msgspec.to_builtins(clarion),
            "single_vs_bare_ratio": round(ratio, 4),
        },
        "batch": batch_summary,
        "problems": problems,
        "pass": {
            "single_vs_bare_ratio": not problems and ratio >= TARGET_RATIO,
            "batch_notifications_per_s": not problems
            and batch_summary["notifications_per_s"] >= TARGET_BATCH_RATE,
        },
        "server_logs": {
            name: tail
            for name, tail in (("bare", log_tail(bare_log)), ("clarion", log_tail(clarion_log)))
            if tail
        },
    }


def main() -> int:
    """Run the benchmark; 0 when every response was as expected, 1 for an invalid run."""
    args = parse_args()
    started = datetime.now(UTC)
    prefix = f"bench-{secrets.token_hex(6)}"
    client = redis.Redis.from_url(args.redis_url)
    result: dict[str, Any] = {
        **result_head("ingest", started, client),
        "parameters": {
            "duration_s": args.duration,
            "cpu_count": os.cpu_count(),
            "service_workers": WORKERS,
            "wrk_threads": WRK_THREADS,
            "wrk_connections": CONNECTIONS,
            "warmup_s": WARMUP_SECONDS,
            "batch_size": BATCH_SIZE,
            "batch_concurrency": BATCH_CONCURRENCY,
            "key_prefix": prefix,
        },
        "targets": {
            "single_vs_bare_ratio": TARGET_RATIO,
            "batch_notifications_per_s": TARGET_BATCH_RATE,
        },
    }
    try:
        with tempfile.TemporaryDirectory(prefix="clarion-bench-") as logs:
            result |= run_all(args.duration, prefix, args.redis_url, Path(logs))
    finally:
        deleted = delete_prefix(client, prefix)
        print(f"deleted {deleted} Redis keys under {prefix}*", flush=True)
        client.close()
    print_table(result)
    write_result("ingest", result, started)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
