"""Peer benchmark: the same delivery job in Clarion, Celery and arq, on the same Redis.

Run from anywhere with the project's virtualenv (with the ``bench`` extra installed)::

    .venv/bin/python bench/peers.py            # every configuration, about 5 minutes on 2 cores
    .venv/bin/python bench/peers.py --quick    # a smoke run, fewer jobs each
    .venv/bin/python bench/peers.py --configs clarion,celery-solo-2   # some of them

The job (``bench/peer_job.py``): one ``order_confirmed`` notification to one EMAIL address,
rendered from the catalog and sent through Clarion's sandbox adapter, which records every
call in Redis; 1 job in 10 fails once with a TRANSIENT error and is retried after an
exponential backoff with full jitter (base 0.1 s). Clarion runs as it ships for two cores;
Celery and arq each run in several configurations an expert would try on two cores —
worker processes, pools, jobs in flight, prefetch, concurrent enqueuers — listed with the
reasons for each in ``bench/peer_configs.py``; the best of each peer by deliveries/s is set
beside Clarion. Clarion's jobs are notifications POSTed in batches of 1000 with ``channels:
["EMAIL"]``, so each is one NORMAL delivery; its retries go through the ``delayed`` set,
with the same policy (a copy of ``clarion.toml`` says so). arq needs redis-py < 6, so it runs
in its own virtual environment (created on first use from ``bench/arq-requirements.txt``).

The configurations run one after the other. For each, after a warm-up of ``WARMUP_JOBS``
jobs (a peer's N when fewer), its N jobs are enqueued while the workers run. **Every clock
starts before the enqueue**: a peer's job at the ms of its UUIDv7 delivery id, minted by the
enqueuing process right before it enqueues the job; a Clarion job at the wall-clock ms at
which the client sent the batch request carrying it, taken right before the request (the API
mints its ids later). Deliveries/s run from the first job's clock start to the last ``sent``
record of the sandbox, so enqueueing is included (its own rate is reported too); latency per
job runs from its clock start to its ``sent`` record, with all N jobs queued at once, so it
is mostly the job's place in the queue divided by the rate. Nothing may be lost: every job
must have exactly one ``sent`` record and the injected failures exactly one ``transient``
record each; a configuration that loses, repeats or fails a job is not eligible as its
peer's best.

The result has every configuration's figures, the best of each peer, and Clarion ÷ best
Celery and Clarion ÷ best arq deliveries/s against the goals (``GOALS``: at least 20 and
10 times), each reached or not. Each configuration has its own key prefix (Celery's broker keys
too, arq's job ids too); all are deleted at the end. The result is printed and written to
``bench/results/peers-<UTC timestamp>.json`` (replacing the older peers results there). The
exit status is 1 when a run lost, repeated or failed a job; a goal not reached alone does
not make it 1.
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
from bench.peer_configs import (
    CONFIGS,
    SYSTEMS,
    ArqConfig,
    CeleryConfig,
    ClarionConfig,
    Config,
)
from bench.peer_job import (
    CATALOG_ENV,
    CHANNEL,
    FAIL_EVERY,
    NOTIFICATION_TYPE,
    PREFIX_ENV,
    PRODUCER_READY_LINE,
    READY_LINE,
    REDIS_URL_ENV,
    RETRY,
    payload,
    transient_failures,
)
from streams.core.keys import KeySpace

WARMUP_JOBS: Final = BATCH_SIZE  # one Clarion batch; a peer's jobs when fewer
# Clarion's deliveries/s at least this many times the best configuration's of each peer.
GOALS: Final = {"celery": 20.0, "arq": 10.0}
PEER_TITLES: Final = {"clarion": "Clarion", "celery": "Celery", "arq": "arq"}
STALL_TIMEOUT_S: Final = 20.0
READY_TIMEOUT_S: Final = 60.0
POLL_S: Final = 0.05
ARQ_REQUIREMENTS: Final = REPO / "bench" / "arq-requirements.txt"


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


def tally(
    record: SandboxRecord, jobs: int, sent_ms: dict[str, int] | None = None
) -> dict[str, Any]:
    """Deliveries/s, latency and losses of one run of ``jobs`` jobs, from its sandbox record.

    A job's clock starts at ``sent_ms[delivery id]`` (Clarion: when the client sent its
    batch) or, without ``sent_ms``, at the ms of its delivery id (a peer: minted right
    before the enqueue).
    """
    sent = record.first_sent_ms

    def start(delivery_id: str) -> int:
        return (sent_ms or {}).get(delivery_id) or id_ms(delivery_id)

    first_ms = min(sent_ms.values()) if sent_ms else min((id_ms(d) for d in sent), default=0)
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
        "latency_ms": latency_summary([float(ms - start(d)) for d, ms in sent.items()]),
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


class Enqueued(msgspec.Struct):
    """How an enqueueing went: its seconds, and for Clarion when each job's batch was sent."""

    seconds: float
    sent_ms: dict[str, int] | None = None  # delivery id -> ms (None: the ms in the id)


Enqueue = Callable[[int, str], Enqueued]  # (jobs, tag) -> how it went


class System(msgspec.Struct):
    """A running configuration: how to enqueue jobs, and its processes and their logs."""

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


def run_producers(argv: list[str], producers: int, env: dict[str, str], logs: Path) -> float:
    """Run ``producers`` enqueuing processes (``argv`` plus ``--producer K --producers P``),
    started together once each is connected (``bench/peer_job.py``, ``enqueueing``); the
    seconds from the first one's start of enqueueing to the last one's end."""
    logged = [logs / f"producer-{producer}.log" for producer in range(producers)]
    spans = []
    with ExitStack() as stack:
        started = []
        for producer, log in enumerate(logged):
            command = [*argv, "--producer", str(producer), "--producers", str(producers)]
            started.append(stack.enter_context(producer_process(command, env, log)))
        for process, log in zip(started, logged, strict=True):  # each is ready, or exits
            if process.stdout.readline().strip() != PRODUCER_READY_LINE:
                raise BenchError(f"an enqueuer did not start:\n{log_tail(log)}")
        for process in started:
            process.stdin.write("go\n")
            process.stdin.close()
        for process, log in zip(started, logged, strict=True):
            out = process.stdout.read()  # its JSON line, then end of file when it exits
            if process.wait() != 0:
                raise BenchError(f"an enqueuer exited with {process.returncode}:\n{log_tail(log)}")
            spans.append(json.loads(out.splitlines()[-1]))
    return float(max(span["ended"] for span in spans) - min(span["started"] for span in spans))


@contextmanager
def producer_process(argv: list[str], env: dict[str, str], log_path: Path) -> Iterator[Any]:
    """An enqueuing process with pipes to its stdin and stdout and its stderr in
    ``log_path``, killed if the block ends before it did."""
    with log_path.open("w") as log:
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            for pipe in (process.stdin, process.stdout):
                pipe.close()


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
def start_clarion(
    config: ClarionConfig, redis_url: str, prefix: str, catalog: Path, logs: Path
) -> Iterator[System]:
    """The API and the delivery workers, as bench/pipeline.py runs them."""
    port = free_port()
    env = service_env(prefix, redis_url, port, catalog) | {"CLARION_LANE_NORMAL": str(config.lane)}
    executable = str(clarion_executable())
    api_log = logs / "clarion-api.log"
    worker_logs = [logs / f"clarion-worker-{slot}.log" for slot in range(config.workers)]
    pieces = batch_pieces(BATCH_SIZE, clarion_item)
    base_url = f"http://127.0.0.1:{port}"

    def enqueue(jobs: int, tag: str) -> Enqueued:
        async def post() -> Ingested:
            concurrency = config.batch_concurrency
            async with api_client(base_url, concurrency, keepalive=False) as http:
                return await post_batches(
                    http, pieces, jobs // BATCH_SIZE, f"{prefix}-{tag}", concurrency
                )

        ingested = asyncio.run(post())
        if ingested.refused or ingested.failed_requests:
            raise BenchError(f"clarion refused jobs: {ingested.first_problem}")
        return Enqueued(ingested.elapsed_s, ingested.sent_ms)

    api_argv = [executable, "api", "--workers", str(config.api_workers)]
    with ExitStack() as stack:
        api = stack.enter_context(running(api_argv, env, api_log))
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
def start_celery(
    config: CeleryConfig, redis_url: str, prefix: str, catalog: Path, logs: Path
) -> Iterator[System]:
    """The configuration's Celery worker processes; its enqueuing processes on demand."""
    try:
        # Imported here: the other systems run without the bench extra.
        from bench.peer_celery import queue_name  # noqa: PLC0415
    except ImportError as error:
        raise BenchError(f"Celery is missing ({error}): pip install -e '.[dev,bench]'") from None
    env = peer_env(redis_url, prefix, catalog)
    worker_logs = [logs / f"celery-worker-{slot}.log" for slot in range(config.workers)]

    def enqueue(jobs: int, tag: str) -> Enqueued:
        argv = [sys.executable, "-m", "bench.peer_celery", "enqueue"]
        argv += ["--count", str(jobs), "--tag", tag]
        return Enqueued(run_producers(argv, config.producers, env, logs))

    with ExitStack() as stack:
        workers = [
            stack.enter_context(running(config.worker_argv(slot, queue_name(prefix)), env, log))
            for slot, log in enumerate(worker_logs)
        ]
        system = System(enqueue, workers, worker_logs)
        wait_ready(system)
        yield system


@contextmanager
def start_arq(
    config: ArqConfig, redis_url: str, prefix: str, catalog: Path, logs: Path
) -> Iterator[System]:
    """The configuration's arq worker processes, in the arq environment; its enqueuing
    processes on demand."""
    python = str(ensure_arq_environment())
    env = peer_env(redis_url, prefix, catalog)
    worker_logs = [logs / f"arq-worker-{slot}.log" for slot in range(config.workers)]
    worker_argv = [python, "-m", "bench.peer_arq", "work", *config.worker_args()]

    def enqueue(jobs: int, tag: str) -> Enqueued:
        argv = [python, "-m", "bench.peer_arq", "enqueue", "--count", str(jobs), "--tag", tag]
        argv += ["--concurrency", str(config.producer_concurrency)]
        return Enqueued(run_producers(argv, config.producers, env, logs))

    with ExitStack() as stack:
        workers = [stack.enter_context(running(worker_argv, env, log)) for log in worker_logs]
        system = System(enqueue, workers, worker_logs)
        wait_ready(system)
        yield system


def start(config: Config, redis_url: str, prefix: str, catalog: Path, logs: Path) -> Any:
    """The running configuration (a context manager of its ``System``)."""
    if isinstance(config, ClarionConfig):
        return start_clarion(config, redis_url, prefix, catalog, logs)
    if isinstance(config, CeleryConfig):
        return start_celery(config, redis_url, prefix, catalog, logs)
    if isinstance(config, ArqConfig):
        return start_arq(config, redis_url, prefix, catalog, logs)
    raise TypeError(f"no starter for {config!r}")


def enqueue_and_wait(
    system: System, client: redis.Redis, stream: str, jobs: int, tag: str
) -> tuple[Enqueued, bool]:
    """Enqueue ``jobs`` and wait for all their sandbox records: (how it went, all there)."""
    target = client.xlen(stream) + jobs + transient_failures(jobs)
    enqueued = system.enqueue(jobs, tag)
    within = 60.0 + jobs / 100  # at least 100 jobs/s, or something is wrong
    return enqueued, wait_recorded(client, stream, target, system.processes, within)


def warmup_jobs(config: Config, jobs: int) -> int:
    """A configuration's warm-up: ``WARMUP_JOBS``, or a peer's ``jobs`` when fewer (a quick
    run); Clarion's is one whole batch."""
    return WARMUP_JOBS if isinstance(config, ClarionConfig) else min(WARMUP_JOBS, jobs)


def measure(
    config: Config, system: System, redis_url: str, keys: KeySpace, jobs: int
) -> dict[str, Any]:
    """Warm up, then enqueue ``jobs`` and wait for their records; the figures of the run."""
    name, warmup = config.name, warmup_jobs(config, jobs)
    client = redis.Redis.from_url(redis_url)
    stream = keys.sandbox_sent
    try:
        # The warm-up's figures are dropped: after the loop, after/enqueued/drained are the run's.
        for tag, count in (("warmup", warmup), ("run", jobs)):
            after = last_entry(client, stream)
            print(f"  {name}: {count:,} jobs ({tag}) ...", flush=True)
            enqueued, drained = enqueue_and_wait(system, client, stream, count, tag)
    finally:
        client.close()
    record = asyncio.run(read_record(redis_url, stream, after))
    run = tally(record, jobs, enqueued.sent_ms)
    seconds = enqueued.seconds
    run |= {
        "warmup_jobs": warmup,
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


def run_config(
    config: Config, redis_url: str, base_prefix: str, catalog: Path, jobs: int
) -> dict[str, Any]:
    """Start one configuration under its own key prefix, measure it, stop it, delete its
    keys; its figures, with the problems that make them untrustworthy."""
    prefix = f"{base_prefix}-{config.name}"
    print(f"{config.name} ({config.settings()}):", flush=True)
    with tempfile.TemporaryDirectory(prefix=f"clarion-peers-{config.name}-") as temp:
        logs = Path(temp)
        try:
            with start(config, redis_url, prefix, catalog, logs) as system:
                run = measure(config, system, redis_url, KeySpace(prefix), jobs)
                run["problems"] = problems_of(config.name, run)
                if run["problems"]:
                    run["log_tails"] = {log.stem: log_tail(log, 10) for log in system.logs}
        finally:
            client = redis.Redis.from_url(redis_url)
            deleted = delete_run_keys(client, prefix)
            client.close()
    return {"system": config.system, "config": config.description(), **run} | {
        "key_prefix": prefix,
        "keys_deleted": deleted,
    }


def delete_run_keys(client: redis.Redis, prefix: str) -> int:
    """Delete a run's keys: those under ``prefix`` and arq's ``arq:<kind>:<prefix>…`` job keys."""
    deleted = delete_prefix(client, prefix)
    batch = list(client.scan_iter(match=f"arq:*:{prefix}*", count=5000))
    for start_at in range(0, len(batch), 5000):
        deleted += client.unlink(*batch[start_at : start_at + 5000])
    return deleted


# --- report --------------------------------------------------------------------------------


def best_of(runs: dict[str, dict[str, Any]], system: str) -> str | None:
    """The configuration of ``system`` with the most deliveries/s among those without problems."""
    trusted = [n for n, run in runs.items() if run["system"] == system and not run["problems"]]
    return max(trusted, key=lambda name: runs[name]["deliveries_per_s"], default=None)


def comparisons(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """For each peer that ran: its best configuration, and Clarion's deliveries/s divided by
    that configuration's against the goal (None when either side has no trustworthy run)."""
    clarion = best_of(runs, "clarion")
    compared = {}
    for peer, goal in GOALS.items():
        if not any(run["system"] == peer for run in runs.values()):
            continue
        best = best_of(runs, peer)
        ratio = None
        if clarion and best and runs[best]["deliveries_per_s"]:
            ratio = round(runs[clarion]["deliveries_per_s"] / runs[best]["deliveries_per_s"], 2)
        compared[peer] = {
            "best": best,
            "best_deliveries_per_s": runs[best]["deliveries_per_s"] if best else None,
            "clarion_deliveries_per_s": runs[clarion]["deliveries_per_s"] if clarion else None,
            "deliveries_per_s": ratio,  # Clarion ÷ the peer's best
            "goal": goal,
            "reached": None if ratio is None else ratio >= goal,
        }
    return compared


def goal_text(compared: dict[str, Any]) -> str:
    """A goal's verdict as a reader should see it: plainly "not reached" when so."""
    if compared["reached"] is None:
        return "not judged (no trustworthy run to compare)"
    return "reached" if compared["reached"] else "not reached"


def print_report(result: dict[str, Any]) -> None:
    """Every configuration's figures, then Clarion ÷ the best of each peer against its goal."""
    runs, best = result["runs"], {c["best"] for c in result["ratios"].values()}
    print(
        f"\nPeer benchmark: 1 job in {FAIL_EVERY} failing once, {result['parameters']['cpu_count']}"
        f" cores, load average at start {result['machine']['load_average_at_start'][0]}\n"
    )
    for name, run in runs.items():
        print(f"  {name + ('*' if name in best else ''):<24} {run['config']['settings']}")
    rows = [
        [
            name + ("*" if name in best else ""),
            f"{run['jobs']:,}",
            f"{run['enqueue_per_s']:,.0f}",
            f"{run['deliveries_per_s']:,.0f}",
            f"{run['latency_ms']['p50']:.0f}",
            f"{run['latency_ms']['p99']:.0f}",
            f"{run['delivered']:,}",
            str(run["lost"]),
            str(run["repeated_sends"]),
            f"{run['sandbox_outcomes'].get('transient', 0)}/{run['transient_injected']}",
        ]
        for name, run in runs.items()
    ]
    header = ["configuration", "jobs", "enqueue/s", "deliv/s", "p50 ms", "p99 ms", "delivered"]
    print("\n" + format_table([*header, "lost", "dup", "retried"], rows))
    print("* the best of its peer by deliveries/s\n")
    rows = [
        [
            f"Clarion ÷ best {PEER_TITLES[peer]} ({c['best'] or 'none'})",
            "n/a" if c["deliveries_per_s"] is None else f"{c['deliveries_per_s']:.2f}",
            f">= {c['goal']:.0f}",
            goal_text(c),
        ]
        for peer, c in result["ratios"].items()
    ]
    if rows:
        print(format_table(["deliveries/s compared", "ratio", "goal", "verdict"], rows) + "\n")
    for peer, c in result["ratios"].items():
        measured = "" if c["deliveries_per_s"] is None else f" ({c['deliveries_per_s']:.2f}x)"
        print(
            f"Goal: Clarion >= {c['goal']:.0f}x the deliveries/s of {PEER_TITLES[peer]}'s best "
            f"configuration: {goal_text(c)}{measured}."
        )
    print_problems(result["problems"])


# --- main ----------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer jobs each")
    parser.add_argument(
        "--jobs", type=int, default=None, help="jobs of every configuration (default: its own)"
    )
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated, of {', '.join(SYSTEMS)} (default: all)",
    )
    parser.add_argument(
        "--configs",
        default="",
        help=f"comma-separated configurations, of {', '.join(CONFIGS)} (default: every one "
        "of --systems)",
    )
    add_redis_url(parser, "every system")
    args = parser.parse_args()
    if args.jobs is not None and args.jobs < FAIL_EVERY:
        parser.error(f"--jobs must be at least {FAIL_EVERY}")
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    names = [name.strip() for name in args.configs.split(",") if name.strip()]
    if sorted(set(systems) - set(SYSTEMS)) or not systems:
        parser.error(f"--systems: choose from {', '.join(SYSTEMS)}")
    if unknown := sorted(set(names) - set(CONFIGS)):
        parser.error(f"--configs: unknown {', '.join(unknown)}")
    chosen = names or [name for name, config in CONFIGS.items() if config.system in systems]
    args.configs = [CONFIGS[name] for name in chosen]
    return args


def jobs_of(config: Config, args: argparse.Namespace) -> int:
    """The configuration's job count: ``--jobs``, or its own for a full or a quick run;
    Clarion's in whole batches (its client posts batches of ``BATCH_SIZE``)."""
    jobs: int = args.jobs or (config.quick_jobs if args.quick else config.jobs)
    if isinstance(config, ClarionConfig):
        return max(BATCH_SIZE, jobs // BATCH_SIZE * BATCH_SIZE)
    return jobs


def main() -> int:
    args = parse_args()
    started = datetime.now(UTC)
    base_prefix = f"bench-{secrets.token_hex(6)}"
    client = redis.Redis.from_url(args.redis_url)
    result: dict[str, Any] = {
        **result_head("peers", started, client),
        "parameters": {
            "quick": args.quick,
            "cpu_count": os.cpu_count(),
            "job": f"{NOTIFICATION_TYPE} to 1 {CHANNEL} address: render "
            "(app.delivery.rendering), send through the sandbox adapter "
            f"(app.providers.sandbox); 1 in {FAIL_EVERY} fails once "
            f"(TRANSIENT), retried after uniform(0, min({RETRY.max_seconds}, "
            f"{RETRY.base_seconds}*2^(attempt-1))) s, at most {RETRY.max_attempts} attempts",
            "timed": "every clock starts before the enqueue: a peer's job at the ms of its "
            "delivery id, minted right before its enqueue; a Clarion job when the client sent "
            "the batch request carrying it. Deliveries/s from the first job's start to the "
            "last sent record, enqueueing included; latency per job from its start to its "
            "sent record, all jobs queued at once",
            "configs": [config.description() for config in args.configs],
            "goals": {f"clarion_vs_best_{peer}_deliveries_per_s": g for peer, g in GOALS.items()},
            "key_prefix": base_prefix,
        },
        "runs": {},
        "problems": [],
    }
    try:
        with tempfile.TemporaryDirectory(prefix="clarion-peers-") as temp:
            catalog = Path(temp) / "clarion.toml"
            peer_catalog(catalog)
            for config in args.configs:
                run = run_config(
                    config, args.redis_url, base_prefix, catalog, jobs_of(config, args)
                )
                result["runs"][config.name] = run
                result["problems"] += run["problems"]
    finally:
        left = delete_run_keys(client, base_prefix)  # anything a failed run left behind
        client.close()
        print(f"deleted the Redis keys under {base_prefix}* ({left} left over)", flush=True)
    result["best"] = {system: best_of(result["runs"], system) for system in SYSTEMS}
    result["ratios"] = comparisons(result["runs"])
    result["pass"] = {"no_problems": not result["problems"]} | {
        f"clarion_vs_best_{peer}_deliveries_per_s": c["reached"]
        for peer, c in result["ratios"].items()
    }
    print_report(result)
    write_result("peers", result, started)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
