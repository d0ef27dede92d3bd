"""Peer benchmark: the same delivery job in Clarion, Celery and arq, on the same Redis.

Run from anywhere with the project's virtualenv (with the ``bench`` extra installed)::

    .venv/bin/python bench/peers.py            # 10,000 jobs per system
    .venv/bin/python bench/peers.py --quick    # 2,000 jobs per system

The job (``bench/peer_job.py``): one ``order_confirmed`` notification to one EMAIL address,
rendered from the catalog and sent through Clarion's sandbox adapter, which records every
call in Redis; 1 job in 10 fails once with a TRANSIENT error and is retried after an
exponential backoff with full jitter (base 0.1 s). The systems, measured one after the other
with two worker processes each:

- Clarion: the API (``clarion api --workers 2``) and two ``clarion worker`` processes, as
  ``bench/pipeline.py`` runs them; jobs are notifications POSTed in batches of 1000 with
  ``channels: ["EMAIL"]``, so each is one NORMAL delivery. Retries go through the
  ``delayed`` set, with the same policy (a copy of ``clarion.toml`` says so).
- Celery (``bench/peer_celery.py``): one worker, ``--pool prefork --concurrency 2``, Redis
  broker, late acknowledgement; jobs sent with ``send_task`` from this process.
- arq (``bench/peer_arq.py``): two worker processes, 32 jobs each at most; jobs enqueued
  from 32 concurrent ``enqueue_job`` calls. arq needs redis-py < 6, so it runs in its own
  virtual environment (created on first use from ``bench/arq-requirements.txt``).

For each system, after a warm-up of ``WARMUP_JOBS`` jobs, N jobs are enqueued while the
workers run. Deliveries/s run from the first job's enqueue (the ms in its UUIDv7 delivery
id, minted right before the enqueue) to the last ``sent`` record of the sandbox: enqueueing
is included, and its own rate is reported too. Latency per job is the ms of its ``sent``
record minus the ms of its id: enqueue to provider call, with all N jobs queued at once.
Nothing may be lost: every job must have exactly one ``sent`` record and the injected
failures must have exactly one ``transient`` record each. Each system has its own key prefix
(Celery's broker keys too, arq's job ids too); all are deleted at the end. The result is
printed, with Clarion ÷ Celery and Clarion ÷ arq ratios, and written to
``bench/results/peers-<UTC timestamp>.json`` (replacing the older peers results there). The
exit status is 1 when a run lost, repeated or failed a job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec
import redis
import redis.asyncio as aredis

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.catalog import parse_catalog
from bench.harness import (
    BATCH_SIZE,
    HEALTH_PATH,
    REPO,
    BenchError,
    Ingested,
    SandboxRecord,
    add_redis_url,
    api_client,
    batch_pieces,
    clarion_executable,
    delete_prefix,
    format_table,
    free_port,
    id_ms,
    latency_summary,
    log_tail,
    post_batches,
    print_problems,
    read_sandbox,
    result_head,
    running,
    service_env,
    unlimited_catalog,
    wait_consumers,
    wait_healthy,
    write_result,
)
from bench.peer_job import (
    CATALOG_ENV,
    CHANNEL,
    FAIL_EVERY,
    NOTIFICATION_TYPE,
    PREFIX_ENV,
    READY_LINE,
    REDIS_URL_ENV,
    RETRY,
    payload,
    transient_failures,
)
from streams.keys import KeySpace

SYSTEMS: Final = ("clarion", "celery", "arq")
DEFAULT_JOBS = 10_000  # sized for the slowest peer to finish within the report's budget
QUICK_JOBS = 2_000
WARMUP_JOBS = BATCH_SIZE  # one Clarion batch
CLARION_CONCURRENCY = 4  # batch requests in flight
WORKERS = 2  # worker processes per system (Celery: prefork children of one worker)
STALL_TIMEOUT_S = 20.0
READY_TIMEOUT_S = 60.0
POLL_S = 0.05
ARQ_REQUIREMENTS = REPO / "bench" / "arq-requirements.txt"


# --- environments and the shared catalog ---------------------------------------------------


def arq_python() -> Path:
    """The arq environment's python, beside the project's (``.venv/peer-arq``)."""
    return Path(sys.prefix) / "peer-arq" / "bin" / "python"


def ensure_arq_environment() -> Path:
    """Create (or update) the arq peer's virtual environment; its python."""
    python = arq_python()
    stamp = python.parent.parent / "installed-requirements.txt"
    wanted = ARQ_REQUIREMENTS.read_text()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"creating the arq peer's environment in {python.parent.parent.name} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(python.parent.parent)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-r", str(ARQ_REQUIREMENTS)], check=True
    )
    stamp.write_text(wanted)
    return python


def peer_catalog(target: Path) -> None:
    """Write ``clarion.toml`` without rate limits and with the peer job's EMAIL retry policy."""
    unlimited_catalog(REPO / "clarion.toml", target)
    text = target.read_text()
    policy = (
        f"retry = {{ base_seconds = {RETRY.base_seconds}, max_seconds = {RETRY.max_seconds}, "
        f"max_attempts = {RETRY.max_attempts} }}"
    )
    text, replaced = re.subn(
        r"(\[channels\.EMAIL\][^\[]*?)retry\s*=\s*\{[^}]*\}", rf"\g<1>{policy}", text, count=1
    )
    target.write_text(text)
    catalog = parse_catalog(text, str(target))
    if not replaced or catalog.channels[CHANNEL].retry != RETRY:
        raise BenchError("clarion.toml: cannot set the EMAIL retry policy of the peer job")


# --- counting what the sandbox recorded ----------------------------------------------------


def last_entry(client: redis.Redis, stream: str) -> str:
    """The id of the newest entry of ``stream`` ("0-0" when there is none)."""
    newest: Any = client.xrevrange(stream, "+", "-", count=1)
    return newest[0][0].decode() if newest else "0-0"


async def read_record(redis_url: str, stream: str, after: str) -> SandboxRecord:
    """The sandbox records of ``stream`` after entry ``after``."""
    client = aredis.Redis.from_url(redis_url)
    try:
        return await read_sandbox(client, stream, after)
    finally:
        await client.aclose()


def tally(record: SandboxRecord, jobs: int) -> dict[str, Any]:
    """Deliveries/s, latency and losses of one run of ``jobs`` jobs, from its sandbox record."""
    sent = record.first_sent_ms
    first_ms = min((id_ms(d) for d in sent), default=0)
    span_s = (record.last_sent_ms - first_ms) / 1000 if sent else 0.0
    return {
        "jobs": jobs,
        "delivered": len(sent),
        "lost": jobs - len(sent),
        "repeated_sends": record.repeated_sends + record.flagged_duplicates,
        "sandbox_outcomes": dict(record.outcomes),
        "transient_injected": transient_failures(jobs),
        "span_s": round(span_s, 3),
        "deliveries_per_s": round(len(sent) / span_s, 1) if span_s > 0 else 0.0,
        "latency_ms": latency_summary([float(ms - id_ms(d)) for d, ms in sent.items()]),
    }


def problems_of(name: str, run: dict[str, Any]) -> list[str]:
    """Why a run's figures cannot be trusted: a job lost, repeated or failed unexpectedly."""
    found = []
    if run["lost"]:
        found.append(f"{name}: {run['lost']} of {run['jobs']} jobs never reached the sandbox")
    if run["repeated_sends"]:
        found.append(f"{name}: {run['repeated_sends']} jobs sent more than once")
    outcomes = run["sandbox_outcomes"]
    if outcomes.get("transient", 0) != run["transient_injected"]:
        found.append(
            f"{name}: {outcomes.get('transient', 0)} transient failures recorded, "
            f"{run['transient_injected']} injected"
        )
    other = {k: v for k, v in outcomes.items() if k not in {"sent", "transient"}}
    if other:
        found.append(f"{name}: unexpected sandbox outcomes {other}")
    if not run["drained"]:
        found.append(f"{name}: not every job was recorded (stalled, timed out or a worker died)")
    return found


def wait_recorded(
    client: redis.Redis, stream: str, target: int, processes: list[Any], within: float
) -> bool:
    """Wait until ``stream`` has ``target`` entries; False on a stall, timeout or dead process."""
    deadline = time.monotonic() + within
    last, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        length = client.xlen(stream)
        if length >= target:
            return True
        if any(process.poll() is not None for process in processes):
            return False
        if length != last:
            last, last_change = length, time.monotonic()
        elif time.monotonic() - last_change > STALL_TIMEOUT_S:
            return False
        time.sleep(POLL_S)
    return False


# --- the systems ---------------------------------------------------------------------------


Enqueue = Callable[[int, str], float]  # (jobs, tag) -> seconds the enqueueing took


class System(msgspec.Struct):
    """A running system: how to enqueue jobs, and its processes and their logs."""

    enqueue: Enqueue
    processes: list[Any]
    logs: list[Path]


def peer_env(redis_url: str, prefix: str, catalog: Path) -> dict[str, str]:
    """The environment of a peer's processes (``bench/peer_job.py`` reads it)."""
    return {
        **os.environ,
        REDIS_URL_ENV: redis_url,
        PREFIX_ENV: prefix,
        CATALOG_ENV: str(catalog),
        "PYTHONPATH": str(REPO),  # the arq environment has no Clarion installed
    }


def wait_ready(system: System) -> None:
    """Wait until every worker of a peer printed ``READY_LINE``."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for process, log in zip(system.processes, system.logs, strict=True):
            if process.poll() is not None:
                raise BenchError(f"{log.stem} exited with {process.returncode}:\n{log_tail(log)}")
        if all(READY_LINE in log.read_text(errors="replace") for log in system.logs):
            return
        time.sleep(0.1)
    raise BenchError(f"peer workers not ready within {READY_TIMEOUT_S} s")


def clarion_item(number: int) -> bytes:
    """Batch item ``number`` after its idempotency key's tag: the peer job as a notification."""
    job = payload(number, "clarion")
    body = msgspec.json.encode(
        {
            "recipient": {"id": job["recipient_id"], "email": job["address"]},
            "type": NOTIFICATION_TYPE,
            "channels": [CHANNEL],
            "data": job["data"],
        }
    )
    return b'-%d", ' % number + body[1:]  # body[1:]: the object without its opening brace


@contextmanager
def start_clarion(redis_url: str, prefix: str, catalog: Path, logs: Path) -> Iterator[System]:
    """The API and ``WORKERS`` delivery workers, as bench/pipeline.py runs them."""
    port = free_port()
    env = service_env(prefix, redis_url, port, catalog)
    executable = str(clarion_executable())
    api_log = logs / "clarion-api.log"
    worker_logs = [logs / f"clarion-worker-{slot}.log" for slot in range(WORKERS)]
    pieces = batch_pieces(BATCH_SIZE, clarion_item)
    base_url = f"http://127.0.0.1:{port}"

    def enqueue(jobs: int, tag: str) -> float:
        async def post() -> Ingested:
            async with api_client(base_url, CLARION_CONCURRENCY, keepalive=False) as http:
                return await post_batches(
                    http, pieces, jobs // BATCH_SIZE, f"{prefix}-{tag}", CLARION_CONCURRENCY
                )

        ingested = asyncio.run(post())
        if ingested.refused or ingested.failed_requests:
            raise BenchError(f"clarion refused jobs: {ingested.first_problem}")
        return ingested.elapsed_s

    with ExitStack() as stack:
        api = stack.enter_context(running([executable, "api", "--workers", "2"], env, api_log))
        workers = [
            stack.enter_context(running([executable, "worker", "--slot", str(slot)], env, log))
            for slot, log in enumerate(worker_logs)
        ]
        wait_healthy(api, base_url + HEALTH_PATH, api_log)
        client = redis.Redis.from_url(redis_url)
        try:
            wait_consumers(client, KeySpace(prefix), workers, worker_logs)
        finally:
            client.close()
        yield System(enqueue, [api, *workers], [api_log, *worker_logs])


@contextmanager
def start_celery(redis_url: str, prefix: str, catalog: Path, logs: Path) -> Iterator[System]:
    """One Celery worker with ``WORKERS`` prefork children; jobs sent from this process."""
    try:
        # Imported here: the other systems run without the bench extra.
        from bench.peer_celery import make_app, queue_name  # noqa: PLC0415
    except ImportError as error:
        raise BenchError(f"Celery is missing ({error}): pip install -e '.[dev,bench]'") from None
    log = logs / "celery-worker.log"
    argv = [
        sys.executable,
        "-m",
        "celery",
        "--app",
        "bench.peer_celery:celery_app",
        "worker",
        "--pool",
        "prefork",
        "--concurrency",
        str(WORKERS),
        "--queues",
        queue_name(prefix),
        "--loglevel",
        "WARNING",
        # No cluster chatter: one worker, nothing to synchronise with.
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    app = make_app(redis_url, prefix)

    def enqueue(jobs: int, tag: str) -> float:
        started = time.perf_counter()
        with app.producer_or_acquire() as producer:
            for number in range(jobs):
                app.send_task("bench.deliver", args=[payload(number, tag)], producer=producer)
        return time.perf_counter() - started

    try:
        with running(argv, peer_env(redis_url, prefix, catalog), log) as worker:
            system = System(enqueue, [worker], [log])
            wait_ready(system)
            yield system
    finally:
        app.close()


@contextmanager
def start_arq(redis_url: str, prefix: str, catalog: Path, logs: Path) -> Iterator[System]:
    """``WORKERS`` arq worker processes; jobs enqueued by a process of the arq environment."""
    python = str(ensure_arq_environment())
    env = peer_env(redis_url, prefix, catalog)
    worker_logs = [logs / f"arq-worker-{slot}.log" for slot in range(WORKERS)]

    def enqueue(jobs: int, tag: str) -> float:
        argv = [python, "-m", "bench.peer_arq", "enqueue", "--count", str(jobs), "--tag", tag]
        done = subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        if done.returncode != 0:
            raise BenchError(f"arq enqueue failed: {done.stderr.strip()[-2000:]}")
        seconds: float = json.loads(done.stdout.splitlines()[-1])["seconds"]
        return seconds

    with ExitStack() as stack:
        workers = [
            stack.enter_context(running([python, "-m", "bench.peer_arq", "work"], env, log))
            for log in worker_logs
        ]
        system = System(enqueue, workers, worker_logs)
        wait_ready(system)
        yield system


STARTERS: Final = {"clarion": start_clarion, "celery": start_celery, "arq": start_arq}


def enqueue_and_wait(
    system: System, client: redis.Redis, stream: str, jobs: int, tag: str
) -> tuple[float, bool]:
    """Enqueue ``jobs`` and wait for all their sandbox records: (enqueue seconds, all there)."""
    target = client.xlen(stream) + jobs + transient_failures(jobs)
    seconds = system.enqueue(jobs, tag)
    within = 60.0 + jobs / 100  # at least 100 jobs/s, or something is wrong
    return seconds, wait_recorded(client, stream, target, system.processes, within)


def measure(name: str, system: System, redis_url: str, keys: KeySpace, jobs: int) -> dict[str, Any]:
    """Warm up, then enqueue ``jobs`` and wait for their records; the figures of the run."""
    client = redis.Redis.from_url(redis_url)
    stream = keys.sandbox_sent
    try:
        # The warm-up's figures are dropped: after the loop, after/seconds/drained are the run's.
        for tag, count in (("warmup", WARMUP_JOBS), ("run", jobs)):
            after = last_entry(client, stream)
            print(f"  {name}: {count:,} jobs ({tag}) ...", flush=True)
            seconds, drained = enqueue_and_wait(system, client, stream, count, tag)
    finally:
        client.close()
    run = tally(asyncio.run(read_record(redis_url, stream, after)), jobs)
    run |= {
        "enqueue_s": round(seconds, 3),
        "enqueue_per_s": round(jobs / seconds, 1) if seconds > 0 else 0.0,
        "drained": drained,
    }
    print(
        f"  {name}: {run['deliveries_per_s']:,.0f} deliveries/s, latency "
        f"p50 {run['latency_ms']['p50']:.0f} ms, p99 {run['latency_ms']['p99']:.0f} ms",
        flush=True,
    )
    return run


def run_system(
    name: str, redis_url: str, base_prefix: str, catalog: Path, logs: Path, jobs: int
) -> tuple[dict[str, Any], list[str]]:
    """Start one system under its own key prefix, measure it, stop it, delete its keys."""
    prefix = f"{base_prefix}-{name}"
    print(f"{name}:", flush=True)
    try:
        with STARTERS[name](redis_url, prefix, catalog, logs) as system:
            run = measure(name, system, redis_url, KeySpace(prefix), jobs)
            problems = problems_of(name, run)
            if problems:
                run["log_tails"] = {log.stem: log_tail(log, 10) for log in system.logs}
    finally:
        client = redis.Redis.from_url(redis_url)
        deleted = delete_run_keys(client, prefix)
        client.close()
    run |= {"key_prefix": prefix, "keys_deleted": deleted}
    return run, problems


def delete_run_keys(client: redis.Redis, prefix: str) -> int:
    """Delete a run's keys: those under ``prefix`` and arq's ``arq:<kind>:<prefix>…`` job keys."""
    deleted = delete_prefix(client, prefix)
    batch = list(client.scan_iter(match=f"arq:*:{prefix}*", count=5000))
    for start in range(0, len(batch), 5000):
        deleted += client.unlink(*batch[start : start + 5000])
    return deleted


# --- report --------------------------------------------------------------------------------


def ratios(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Clarion ÷ each peer: deliveries/s (higher is better) and latency (lower is better)."""
    if "clarion" not in runs:
        return {}
    ours = runs["clarion"]

    def divide(mine: float, theirs: float) -> float | None:
        return round(mine / theirs, 3) if theirs else None

    return {
        peer: {
            "deliveries_per_s": divide(ours["deliveries_per_s"], run["deliveries_per_s"]),
            "latency_p50": divide(ours["latency_ms"]["p50"], run["latency_ms"]["p50"]),
            "latency_p99": divide(ours["latency_ms"]["p99"], run["latency_ms"]["p99"]),
        }
        for peer, run in runs.items()
        if peer != "clarion"
    }


def ratio_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def print_report(result: dict[str, Any]) -> None:
    """The runs side by side, then the ratios."""
    params = result["parameters"]
    print(
        f"\nPeer benchmark: {params['jobs']:,} jobs per system, 1 in {FAIL_EVERY} failing once, "
        f"{params['cpu_count']} cores, load average at start "
        f"{result['machine']['load_average_at_start'][0]}\n"
    )
    rows = [
        [
            name,
            f"{run['enqueue_per_s']:,.0f}",
            f"{run['deliveries_per_s']:,.0f}",
            f"{run['latency_ms']['p50']:.0f}",
            f"{run['latency_ms']['p99']:.0f}",
            f"{run['delivered']:,}",
            str(run["lost"]),
            str(run["repeated_sends"]),
            f"{run['sandbox_outcomes'].get('transient', 0)}/{run['transient_injected']}",
        ]
        for name, run in result["runs"].items()
    ]
    header = ["system", "enqueue/s", "deliv/s", "p50 ms", "p99 ms", "delivered", "lost", "dup"]
    print(format_table([*header, "retried"], rows) + "\n")
    rows = [
        [
            f"Clarion / {peer}",
            ratio_text(r["deliveries_per_s"]),
            ratio_text(r["latency_p50"]),
            ratio_text(r["latency_p99"]),
        ]
        for peer, r in result["ratios"].items()
    ]
    if rows:
        header = ["ratio", "deliveries/s (higher: better)", "p50 (lower: better)", "p99"]
        print(format_table(header, rows) + "\n")
    print_problems(result["problems"])


# --- main ----------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS:,} jobs per system")
    parser.add_argument("--jobs", type=int, default=None, help=f"default {DEFAULT_JOBS:,}")
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated, of {', '.join(SYSTEMS)} (default: all)",
    )
    add_redis_url(parser, "every system")
    args = parser.parse_args()
    args.jobs = args.jobs or (QUICK_JOBS if args.quick else DEFAULT_JOBS)
    if args.jobs < BATCH_SIZE:
        parser.error(f"--jobs must be at least {BATCH_SIZE}")
    args.jobs = args.jobs // BATCH_SIZE * BATCH_SIZE  # Clarion posts whole batches
    args.systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = sorted(set(args.systems) - set(SYSTEMS))
    if unknown or not args.systems:
        parser.error(f"--systems: choose from {', '.join(SYSTEMS)}")
    return args


def main() -> int:
    args = parse_args()
    started = datetime.now(UTC)
    base_prefix = f"bench-{secrets.token_hex(6)}"
    client = redis.Redis.from_url(args.redis_url)
    result: dict[str, Any] = {
        **result_head("peers", started, client),
        "parameters": {
            "jobs": args.jobs,
            "warmup_jobs": WARMUP_JOBS,
            "cpu_count": os.cpu_count(),
            "job": f"{NOTIFICATION_TYPE} to 1 {CHANNEL} address: render "
            "(app.delivery.rendering), send through the sandbox adapter "
            f"(app.providers.sandbox); 1 in {FAIL_EVERY} fails once "
            f"(TRANSIENT), retried after uniform(0, min({RETRY.max_seconds}, "
            f"{RETRY.base_seconds}*2^(attempt-1))) s, at most {RETRY.max_attempts} attempts",
            "timed": "deliveries/s from the first job's delivery id (minted right before its "
            "enqueue) to the last sent record, enqueueing included; latency per job from its "
            "id to its sent record",
            "clarion": f"clarion api --workers 2 and {WORKERS} clarion worker processes; "
            f"batches of {BATCH_SIZE} over HTTP, {CLARION_CONCURRENCY} in flight",
            "celery": f"one worker, --pool prefork --concurrency {WORKERS}, acks_late, "
            "prefetch multiplier 16, Redis broker; send_task from one thread",
            "arq": f"{WORKERS} worker processes, max_jobs 32, poll_delay 0.05 s; "
            "enqueue_job from 32 concurrent calls",
            "systems": args.systems,
            "key_prefix": base_prefix,
        },
        "runs": {},
        "problems": [],
    }
    try:
        with tempfile.TemporaryDirectory(prefix="clarion-peers-") as temp:
            catalog = Path(temp) / "clarion.toml"
            peer_catalog(catalog)
            for name in args.systems:
                run, problems = run_system(
                    name, args.redis_url, base_prefix, catalog, Path(temp), args.jobs
                )
                result["runs"][name] = run
                result["problems"] += problems
    finally:
        left = delete_run_keys(client, base_prefix)  # anything a failed run left behind
        client.close()
        print(f"deleted the Redis keys under {base_prefix}* ({left} left over)", flush=True)
    result["ratios"] = ratios(result["runs"])
    result["pass"] = {"no_problems": not result["problems"]}
    print_report(result)
    write_result("peers", result, started)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
