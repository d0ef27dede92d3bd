"""Projector benchmark: events into PostgreSQL, alone and behind the running pipeline.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/projector.py            # 50,000 notifications; 20 s at 10,000/s
    .venv/bin/python bench/projector.py --quick    # 10,000 notifications; 5 s

It uses a throwaway PostgreSQL database (``clarion_bench_<hex>`` on
``CLARION_BENCH_DATABASE_URL``'s server, by default the local one; dropped at the end),
with the daily partitions of ``--history-days`` (30) days before today made first, as a
service that has run for the default retention window holds them, and measures, one after
the other:

1. Throughput: a shard's ``events`` stream is filled first — notifications accepted through
   ``app.ingest.ingestor.Ingestor`` in this process (1 of 5 ``otp``: 2 events per
   notification; 1 of 5
   ``order_confirmed`` with two push tokens: 5 events; the rest ``order_confirmed`` with one:
   4 events) while a delivery worker in the same process sends them to a zero-latency
   sandbox (one ``DeliverySent`` per delivery; an entry holds the events of one ingest or
   finish script call). Then one ``Projector`` starts
   (in-process, uvloop) and events/s run from its start until the group ``projector`` has
   nothing pending and nothing unread; the rows in ``delivery_event`` must equal the events
   in the stream. The time inside ``rows_of`` and ``apply`` is recorded by wrapping them (the
   projector calls them through ``projections.rows``); the next batch is read and turned into rows
   while one is written, so the two overlap.
2. Lag under load: the API (``clarion api --workers 2``), two delivery workers and
   ``clarion projector`` run as processes against the database; batches of 1000
   notifications (pipeline.py's end-to-end mix, 2.6 deliveries each) are posted at a steady
   pace for ``--lag-seconds`` to reach ``--rate`` deliveries/s, and
   ``projections.queries.projection_lag_ms`` is sampled every 100 ms until everything is
   delivered and projected. Then the read model is compared with the stream.

The providers have no rate limit in either phase. All Redis keys live under a random
``bench-<hex>`` prefix and are deleted at the end; the result is printed and written to
``bench/results/projector-<UTC timestamp>.json``, which replaces the older projector results
there. The exit status is 1 only when the run cannot be trusted (events lost, rows missing, a
service failed); a missed target is not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import redis
import redis.asyncio as aredis
import uvloop

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import projections.rows as rows_module
from app.catalog import load_catalog
from app.ingest.requests import NotificationRequest, Recipient
from app.logging import configure_logging
from bench.harness import (
    BATCH_SIZE,
    HEALTH_PATH,
    REPO,
    BenchError,
    Ingested,
    Throwaway,
    add_redis_url,
    api_client,
    batch_pieces,
    check_deliveries,
    clarion_executable,
    cpu_snapshot,
    create_database,
    delete_prefix,
    drop_database,
    e2e_item,
    expected_e2e_deliveries,
    format_table,
    free_port,
    group_done,
    in_process,
    last_entry_id,
    latency_summary,
    log_findings,
    log_tail,
    pending_total,
    post_batches,
    print_problems,
    read_sandbox,
    redis_pid,
    remaining_work,
    result_head,
    row_counts,
    running,
    service_env,
    stream_events,
    truncate_read_model,
    unlimited_catalog,
    verdict,
    wait_consumers,
    wait_healthy,
    work_state,
    write_result,
)
from projections.database import connect as connect_database
from projections.partitions import ensure_partitions
from projections.projector import BATCH_BYTES, READ_COUNT, Projector
from projections.queries import projection_lag_ms
from streams.consumer_groups import PROJECTOR_GROUP
from streams.keys import KeySpace

DEFAULT_NOTIFICATIONS = 50_000
QUICK_NOTIFICATIONS = 10_000
DEFAULT_RATE = 10_000.0  # deliveries/s offered in the lag phase
DEFAULT_LAG_SECONDS = 20
QUICK_LAG_SECONDS = 5
INGEST_CHUNK = 1000  # notifications per ingest_many call
LAG_CONCURRENCY = 8  # batch requests in flight at most while pacing
LAG_SAMPLE_S = 0.1
POLL_S = 0.01  # how often phase 1 checks whether the projector is done
DELIVERY_WORKERS = 2
API_WORKERS = 2
STALL_TIMEOUT_S = 30.0
PRODUCER = "bench"

TARGET_EVENTS_PER_S = 30_000.0
TARGET_LAG_P99_MS = 1000.0
TARGET_RATE = 10_000.0  # deliveries/s the lag target is set for


# --- phase 1: projector throughput ---------------------------------------------------------


def ingest_request(i: int) -> NotificationRequest:
    """Notification ``i``: otp (2 events), order_confirmed with 2 tokens (5) or 1 token (4)."""
    if i % 5 == 0:
        return NotificationRequest(
            recipient=Recipient(id=f"user-{i}", phone="+4915112345678"),
            type="otp",
            data={"code": f"{i % 1_000_000:06d}"},
        )
    tokens = [f"token-{i}-a", f"token-{i}-b"] if i % 5 == 1 else [f"token-{i}"]
    return NotificationRequest(
        recipient=Recipient(id=f"user-{i}", email=f"user{i}@example.com", push_tokens=tokens),
        type="order_confirmed",
        data={"order_id": f"A-{i}"},
    )


class _Answer(msgspec.Struct):
    id: str
    deliveries: list[dict[str, Any]]


class Timed:
    """Wall time and calls of one function, gathered by the stopwatch ``around`` puts on it."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def around(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` (sync or async) with this stopwatch around every call."""
        if asyncio.iscoroutinefunction(function):

            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await function(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - started
                    self.calls += 1

            return timed_async

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
                self.calls += 1

        return timed


@contextmanager
def timing_projector_steps() -> Iterator[tuple[Timed, Timed]]:
    """Time every ``rows_of`` and every ``apply`` call of the projector during the block;
    yields their ``Timed`` (rows_of, apply).

    The projector looks both up in the namespace of ``projections.projector`` at each call,
    so a stopwatch put there for the block reaches every call. This is the one place that
    knows where they are looked up.
    """
    steps = {"rows_of": Timed(), "apply": Timed()}
    originals = {name: getattr(rows_module, name) for name in steps}
    for name, stopwatch in steps.items():
        setattr(rows_module, name, stopwatch.around(originals[name]))
    try:
        yield steps["rows_of"], steps["apply"]
    finally:
        for name, original in originals.items():
            setattr(rows_module, name, original)


async def fill_stream(
    client: aredis.Redis, keys: KeySpace, catalog_path: Path, notifications: int, tag: str
) -> dict[str, Any]:
    """Accept ``notifications`` through Ingestor while a delivery worker sends them all."""
    configure_logging("console", "WARNING")  # the in-process worker's info lines are noise
    catalog = load_catalog(catalog_path)
    ingestor, worker = in_process(client, keys, catalog)
    worker_task = asyncio.create_task(worker.run())
    decoder = msgspec.json.Decoder(_Answer)
    accepted = refused = queued = 0
    first_refusal = ""
    started = time.perf_counter()
    try:
        for first in range(0, notifications, INGEST_CHUNK):
            numbers = range(first, min(first + INGEST_CHUNK, notifications))
            entries: list[tuple[str, NotificationRequest]] = [
                (f"{tag}-{i}", ingest_request(i)) for i in numbers
            ]
            for outcome in await ingestor.ingest_many(PRODUCER, entries):
                if outcome.status_code != 202:
                    refused += 1
                    first_refusal = first_refusal or f"{outcome.status_code} {outcome.detail}"
                    continue
                accepted += 1
                answer = decoder.decode(outcome.response)
                queued += sum(1 for d in answer.deliveries if d.get("status") == "QUEUED")
        ingest_s = time.perf_counter() - started

        async def delivered() -> bool:
            sent = await client.xlen(keys.sandbox_sent)
            return sent >= queued and remaining_work(await work_state(client, keys)) == 0

        drained = await wait_for(delivered, STALL_TIMEOUT_S + queued / 2000)
    finally:
        worker.stop()
        await asyncio.wait_for(worker_task, 30)
    return {
        "notifications_accepted": accepted,
        "notifications_refused": refused,
        "first_refusal": first_refusal,
        "deliveries_queued": queued,
        "deliveries_sent": await client.xlen(keys.sandbox_sent),
        "drained": drained,
        "ingest_s": round(ingest_s, 3),
        "fill_s": round(time.perf_counter() - started, 3),
    }


async def wait_for(check: Callable[[], Awaitable[bool]], within: float) -> bool:
    """Poll ``check`` until it is true; False after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def measure_throughput(
    redis_url: str, database: Throwaway, prefix: str, catalog_path: Path, notifications: int
) -> tuple[dict[str, Any], list[str]]:
    """Phase 1: fill the stream, then time one in-process Projector draining it."""
    keys = KeySpace(prefix)
    stream = keys.shard(0).events
    client = aredis.Redis.from_url(redis_url)
    pool = await connect_database(database.url)
    problems: list[str] = []
    try:
        print(f"  filling {stream} ({notifications:,} notifications + deliveries) ...", flush=True)
        filled = await fill_stream(client, keys, catalog_path, notifications, prefix)
        if filled["notifications_refused"] or not filled["drained"]:
            problems.append(f"throughput: filling the stream went wrong: {filled}")
        contents = await stream_events(client, stream)
        print(
            f"  {contents.entries:,} entries, {contents.events:,} events; projecting ...",
            flush=True,
        )
        projector = Projector(client, pool, keys, consumer="bench-projector")
        cpu_started = time.process_time()
        postgres_started = cpu_snapshot({}, None)
        started = time.perf_counter()
        with timing_projector_steps() as (rows_time, apply_time):
            task = asyncio.create_task(projector.run())
            deadline = started + STALL_TIMEOUT_S + contents.events / 5000
            finished = True
            while not await group_done(client, stream):
                if task.done() or time.perf_counter() > deadline:
                    finished = False
                    break
                await asyncio.sleep(POLL_S)
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
            postgres_cpu = cpu_snapshot({}, None).used(postgres_started)["postgresql"]
            projector.stop()
            await asyncio.wait_for(task, 30)
        counts = await row_counts(pool)
        sizes = await table_bytes(pool)
    finally:
        await pool.close()
        await client.aclose()
    if not finished:
        problems.append("throughput: the projector did not finish within the timeout")
    if counts["delivery_event"] != contents.events:
        problems.append(
            f"throughput: {counts['delivery_event']} rows in delivery_event, "
            f"{contents.events} events in the stream"
        )
    if counts["notification"] != filled["notifications_accepted"]:
        problems.append(f"throughput: {counts['notification']} notification rows")
    if counts["delivery_by_status"].get("SENT", 0) != filled["deliveries_queued"]:
        problems.append(f"throughput: delivery rows by status {counts['delivery_by_status']}")
    seconds = elapsed or float("inf")
    batches = apply_time.calls or 1
    return {
        "fill": filled,
        "stream": contents.summary(),
        "read_count_entries": READ_COUNT,
        "batch_bytes": BATCH_BYTES,
        "batches": apply_time.calls,
        "mean_entries_per_batch": round(contents.entries / batches, 1),
        "mean_events_per_batch": round(contents.events / batches, 1),
        "finished": finished,
        "elapsed_s": round(elapsed, 3),
        "events_per_s": round(contents.events / seconds, 1),
        "entries_per_s": round(contents.entries / seconds, 1),
        "process_cpu_s": round(cpu, 3),
        # Tables with their indexes and partitions, per notification projected.
        "read_model_bytes_per_notification": {
            table: round(size / max(1, filled["notifications_accepted"]))
            for table, size in sizes.items()
        },
        # Every postgres process of this machine: the server's work for the projector.
        "postgresql_cpu_s": postgres_cpu,
        "postgresql_us_per_event": round(postgres_cpu / max(1, contents.events) * 1e6, 2),
        "time_split_s": {
            "rows_of": round(rows_time.seconds, 3),
            "apply": round(apply_time.seconds, 3),
        },
        # apply() runs while the next batch is read and decoded: the share of the elapsed
        # time during which a batch was being written.
        "apply_share_of_elapsed": round(apply_time.seconds / seconds, 3),
        "apply_ms_per_batch": round(apply_time.seconds * 1000 / batches, 2),
        "apply_us_per_event": round(apply_time.seconds * 1e6 / max(1, contents.events), 2),
        "rows": counts,
    }, problems


# --- phase 2: projection lag while the pipeline runs ---------------------------------------


def merge(total: Ingested, part: Ingested) -> None:
    """Add one batch's ``part`` to ``total`` (elapsed time is the caller's)."""
    total.notifications += part.notifications
    total.refused += part.refused
    total.failed_requests += part.failed_requests
    total.first_problem = total.first_problem or part.first_problem
    total.queued.update(part.queued)
    total.sent_ms.update(part.sent_ms)
    total.not_queued.update(part.not_queued)
    if part.first_accept_ms is not None:
        total.first_accept_ms = min(
            total.first_accept_ms or part.first_accept_ms, part.first_accept_ms
        )


async def paced_ingest(base_url: str, rate: float, seconds: int, tag: str) -> tuple[Ingested, int]:
    """Post 1000-item batches evenly spaced to offer ``rate`` deliveries/s for ``seconds``.

    Returns what was accepted and how many batches started late (all slots were busy).
    """
    per_batch = expected_e2e_deliveries(BATCH_SIZE)
    interval = per_batch / rate
    batches = max(1, round(seconds / interval))
    pieces = batch_pieces(BATCH_SIZE, e2e_item)
    total = Ingested()
    late = 0
    slots = asyncio.Semaphore(LAG_CONCURRENCY)
    async with api_client(base_url, LAG_CONCURRENCY, keepalive=False) as http:

        async def one(number: int) -> None:
            try:
                part = await post_batches(http, pieces, 1, f"{tag}-{number}", 1)
                merge(total, part)
            finally:
                slots.release()

        loop = asyncio.get_running_loop()
        started = loop.time()
        tasks = []
        for number in range(batches):
            delay = started + number * interval - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if slots.locked():
                late += 1
            await slots.acquire()
            tasks.append(asyncio.create_task(one(number)))
        await asyncio.gather(*tasks)
        total.elapsed_s = loop.time() - started
    return total, late


class LagSampler:
    """``projection_lag_ms`` every ``LAG_SAMPLE_S`` s: (seconds since start, lag ms)."""

    def __init__(self, client: aredis.Redis, keys: KeySpace) -> None:
        self.client = client
        self.keys = keys
        self.samples: list[tuple[float, int]] = []
        self.errors = 0
        self.started = time.monotonic()
        self._stop = asyncio.Event()

    async def run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                lag = await projection_lag_ms(self.client, self.keys)
            except redis.RedisError:
                self.errors += 1
            else:
                self.samples.append((time.monotonic() - self.started, lag))
            next_at += LAG_SAMPLE_S
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()

    def summary(self, until: float | None = None) -> dict[str, float]:
        values = [float(lag) for at, lag in self.samples if until is None or at <= until]
        return latency_summary(values)


async def drive_lag(
    base_url: str, redis_url: str, database: Throwaway, keys: KeySpace, args: argparse.Namespace
) -> tuple[dict[str, Any], list[str]]:
    """Load the running services, sample the projection lag, then check the read model."""
    client = aredis.Redis.from_url(redis_url)
    pool = await asyncpg.create_pool(database.url, min_size=1, max_size=2)
    problems: list[str] = []
    stream = keys.shard(0).events
    try:
        after = await last_entry_id(client, keys.sandbox_sent)
        sampler = LagSampler(client, keys)
        sampling = asyncio.create_task(sampler.run())
        print(
            f"  offering {args.rate:,.0f} deliveries/s for {args.lag_seconds} s "
            f"(batches of {BATCH_SIZE}) ...",
            flush=True,
        )
        ingested, late = await paced_ingest(base_url, args.rate, args.lag_seconds, keys.prefix)
        load_end = time.monotonic() - sampler.started
        queued = len(ingested.queued)

        async def delivered() -> bool:
            sent = await client.xlen(keys.sandbox_sent)
            return sent >= queued and remaining_work(await work_state(client, keys)) == 0

        drained = await wait_for(delivered, STALL_TIMEOUT_S + queued / 2000)
        drained_at = time.monotonic() - sampler.started
        contents = await stream_events(client, stream)

        async def projected() -> bool:
            if await projection_lag_ms(client, keys):
                return False
            async with pool.acquire() as connection:
                rows = await connection.fetchval("SELECT count(*) FROM delivery_event")
            return int(rows) >= contents.events

        caught_up = await wait_for(projected, STALL_TIMEOUT_S + contents.events / 10_000)
        caught_up_at = time.monotonic() - sampler.started
        sampler.stop()
        await sampling
        final_lag = await projection_lag_ms(client, keys)
        counts = await row_counts(pool)
        record = await read_sandbox(client, keys.sandbox_sent, after)
        state = await work_state(client, keys)
    finally:
        await pool.close()
        await client.aclose()
    checked, delivery_problems = check_deliveries(ingested.queued, record, "lag phase")
    problems += delivery_problems
    first_ms = ingested.first_accept_ms or 0
    span_s = (record.last_sent_ms - first_ms) / 1000 if record.last_sent_ms else 0.0
    sent = sum(1 for d in ingested.queued if d in record.first_sent_ms)
    if ingested.refused or ingested.failed_requests:
        problems.append(f"lag phase ingest: {ingested.first_problem}")
    if not drained:
        problems.append("lag phase: the delivery workers did not finish within the timeout")
    if not caught_up:
        problems.append("lag phase: the projector did not catch up within the timeout")
    if counts["delivery_event"] != contents.events:
        problems.append(
            f"lag phase: {counts['delivery_event']} rows in delivery_event, "
            f"{contents.events} events in the stream"
        )
    if counts["notification"] != ingested.notifications:
        problems.append(f"lag phase: {counts['notification']} notification rows")
    if counts["delivery_by_status"].get("SENT", 0) != queued:
        problems.append(f"lag phase: delivery rows by status {counts['delivery_by_status']}")
    if sampler.errors:
        problems.append(f"lag phase: {sampler.errors} lag samples failed")
    return {
        **ingested.summary(),
        "batches_started_late": late,
        "offered_deliveries_per_s": args.rate,
        "ingest_deliveries_per_s": round(queued / (ingested.elapsed_s or float("inf")), 1),
        **checked,
        "end_to_end_span_s": round(span_s, 3),
        "end_to_end_deliveries_per_s": round(sent / span_s, 1) if span_s > 0 else 0.0,
        "stream": contents.summary(),
        "load_end_s": round(load_end, 3),
        "drained": drained,
        "delivered_all_at_s": round(drained_at, 3),
        "caught_up": caught_up,
        "caught_up_at_s": round(caught_up_at, 3),
        "projected_events_per_s": round(contents.events / caught_up_at, 1) if caught_up else 0,
        "final_lag_ms": final_lag,
        "lag_samples": len(sampler.samples),
        "lag_ms": sampler.summary(),
        "lag_ms_during_load": sampler.summary(load_end),
        "lag_ms_by_second": lag_by_second(sampler.samples),
        "rows": counts,
        "pending_work_at_end": pending_total(state),
    }, problems


def cpu_budget(used: dict[str, float], deliveries: int) -> dict[str, Any]:
    """CPU seconds each part used for the lag phase (from the first request until the
    projector caught up), per delivery, and the cores each part needs at the target rate."""
    parts = {name: seconds for name, seconds in used.items() if name != "bench"}
    per_delivery = {
        name: round(seconds * 1e6 / max(1, deliveries), 1) for name, seconds in parts.items()
    }
    total = sum(parts.values())
    return {
        "seconds": used,
        "us_per_delivery": per_delivery,
        "cores_at_target_rate": {
            name: round(seconds * TARGET_RATE / max(1, deliveries), 2)
            for name, seconds in parts.items()
        },
        "total_us_per_delivery": round(total * 1e6 / max(1, deliveries), 1),
        "total_cores_at_target_rate": round(total * TARGET_RATE / max(1, deliveries), 2),
        "note": "bench (the load generator) is not counted in the totals",
    }


def lag_by_second(samples: list[tuple[float, int]]) -> list[int]:
    """The largest lag sample of each second since sampling started."""
    worst: dict[int, int] = {}
    for at, lag in samples:
        worst[int(at)] = max(worst.get(int(at), 0), lag)
    return [worst.get(second, 0) for second in range(max(worst, default=-1) + 1)]


def wait_projector(client: redis.Redis, keys: KeySpace, process: Any, log_path: Path) -> None:
    """Wait until the projector process has its consumer in the events stream's group."""
    stream = keys.shard(0).events
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError(f"projector exited with {process.returncode}:\n{log_tail(log_path)}")
        try:
            consumers: Any = client.xinfo_consumers(stream, PROJECTOR_GROUP)
        except redis.ResponseError:
            consumers = []
        if consumers:
            return
        time.sleep(0.1)
    raise BenchError("the projector did not start reading within 30 s:\n" + log_tail(log_path))


def measure_lag(
    args: argparse.Namespace, database: Throwaway, prefix: str, catalog: Path, logs: Path
) -> tuple[dict[str, Any], list[str]]:
    """Phase 2: the API, delivery workers and the projector as processes, under load."""
    keys = KeySpace(prefix)
    port = free_port()
    env = service_env(prefix, args.redis_url, port, catalog)
    env["CLARION_DATABASE_URL"] = database.url
    clarion = str(clarion_executable())
    api_log = logs / "api.log"
    worker_logs = [logs / f"worker-{slot}.log" for slot in range(DELIVERY_WORKERS)]
    projector_log = logs / "projector.log"
    client = redis.Redis.from_url(args.redis_url)
    result: dict[str, Any]
    try:
        with ExitStack() as stack:
            api = stack.enter_context(
                running([clarion, "api", "--workers", str(API_WORKERS)], env, api_log)
            )
            workers = [
                stack.enter_context(
                    running([clarion, "worker", "--slot", str(slot)], env, worker_logs[slot])
                )
                for slot in range(DELIVERY_WORKERS)
            ]
            projector = stack.enter_context(running([clarion, "projector"], env, projector_log))
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(api, base_url + HEALTH_PATH, api_log)
            wait_consumers(client, keys, workers, worker_logs)
            wait_projector(client, keys, projector, projector_log)
            services = {
                "api": [api.pid],
                "workers": [w.pid for w in workers],
                "projector": [projector.pid],
            }
            server = redis_pid(args.redis_url)
            before = cpu_snapshot(services, server)
            result, problems = asyncio.run(
                drive_lag(base_url, args.redis_url, database, keys, args)
            )
            result["cpu"] = cpu_budget(
                cpu_snapshot(services, server).used(before), result["deliveries_queued"]
            )
            for process, name in [(api, "API"), (projector, "projector")] + [
                (w, "worker") for w in workers
            ]:
                if process.poll() is not None:
                    problems.append(f"{name} exited with {process.returncode}")
    finally:
        client.close()
    findings = {p.stem: log_findings(p) for p in [api_log, *worker_logs, projector_log]}
    result["logs"] = findings
    problems += [
        f"{name}: {f['errors']} error lines" for name, f in findings.items() if f["errors"]
    ]
    return result, problems


# --- report --------------------------------------------------------------------------------


def print_report(result: dict[str, Any]) -> None:
    params = result["parameters"]
    print(
        f"\nClarion projector benchmark: {params['cpu_count']} cores, load average at start "
        f"{result['machine']['load_average_at_start'][0]}, PostgreSQL {result['postgres']}\n"
    )
    one = result["throughput"]
    fill, stream = one["fill"], one["stream"]
    split = one["time_split_s"]
    print(
        f"1. Projector alone, in-process (uvloop), entries read {one['read_count_entries']} at "
        f"a time into batches of up to {one['batch_bytes'] / 1e6:g} MB of events: "
        f"{fill['notifications_accepted']:,} notifications, "
        f"{fill['deliveries_sent']:,} sent; events per entry {stream['entries_by_event_count']}"
    )
    rows = [
        ["entries", f"{stream['entries']:,}", f"{one['entries_per_s']:,.0f}/s"],
        [
            "events (= delivery_event rows)",
            f"{stream['events']:,}",
            f"{one['events_per_s']:,.0f}/s",
        ],
        ["rows in delivery_event", f"{one['rows']['delivery_event']:,}", ""],
        ["batches", f"{one['batches']:,}", f"{one['mean_events_per_batch']:.0f} events each"],
        ["elapsed", f"{one['elapsed_s']:.2f} s", f"CPU {one['process_cpu_s']:.2f} s"],
        [
            "PostgreSQL bytes per notification",
            f"{sum(one['read_model_bytes_per_notification'].values()):,}",
            " · ".join(f"{k} {v:,}" for k, v in one["read_model_bytes_per_notification"].items()),
        ],
        [
            "PostgreSQL CPU",
            f"{one['postgresql_cpu_s']:.2f} s",
            f"{one['postgresql_us_per_event']:.1f} µs/event",
        ],
        [
            "  a batch being written (apply)",
            f"{split['apply']:.2f} s",
            f"{one['apply_ms_per_batch']:.1f} ms/batch, "
            f"{one['apply_share_of_elapsed']:.0%} of elapsed",
        ],
        ["  in rows_of() (overlaps writing)", f"{split['rows_of']:.2f} s", ""],
    ]
    print(format_table(["what", "count", "rate"], rows) + "\n")
    two = result["lag"]
    if two:
        lag, during = two["lag_ms"], two["lag_ms_during_load"]
        print(
            f"2. Pipeline as processes (API x{API_WORKERS}, {DELIVERY_WORKERS} workers, "
            f"projector), {two['offered_deliveries_per_s']:,.0f} deliveries/s offered for "
            f"{params['lag_seconds']} s; lag sampled every {LAG_SAMPLE_S * 1000:.0f} ms"
        )
        rows = [
            ["deliveries queued", f"{two['deliveries_queued']:,}"],
            ["ingest deliveries/s (achieved)", f"{two['ingest_deliveries_per_s']:,.0f}"],
            ["end-to-end deliveries/s (to SENT)", f"{two['end_to_end_deliveries_per_s']:,.0f}"],
            ["batches started late", str(two["batches_started_late"])],
            ["events in stream / rows", f"{two['stream']['events']:,} / "
             f"{two['rows']['delivery_event']:,}"],
            ["lag p50/p99/max, whole run", f"{lag['p50']:.0f} / {lag['p99']:.0f} / "
             f"{lag['max']:.0f} ms ({lag['count']} samples)"],
            ["lag p50/p99/max, during load", f"{during['p50']:.0f} / {during['p99']:.0f} / "
             f"{during['max']:.0f} ms"],
            ["load ended / delivered / caught up", f"{two['load_end_s']:.1f} / "
             f"{two['delivered_all_at_s']:.1f} / {two['caught_up_at_s']:.1f} s"],
            ["caught up (lag 0, rows = events)", "yes" if two["caught_up"] else "NO"],
            ["projector events/s (events / caught-up time)",
             f"{two['projected_events_per_s']:,.0f}"],
            ["lost / duplicated deliveries", f"{two['deliveries_missing']} / "
             f"{two['repeated_sends'] + two['sandbox_flagged_duplicates']}"],
        ]  # fmt: skip
        print(format_table(["what", "measured"], rows))
        print(f"max lag per second (ms): {two['lag_ms_by_second']}\n")
        budget = two["cpu"]
        print(
            f"CPU used from the first request until caught up, per delivery, and the cores "
            f"each part needs at {TARGET_RATE:,.0f} deliveries/s ({params['cpu_count']} here):"
        )
        rows = [
            [name, f"{seconds:.2f}", f"{budget['us_per_delivery'][name]:,.0f}",
             f"{budget['cores_at_target_rate'][name]:.2f}"]
            for name, seconds in budget["seconds"].items() if name != "bench"
        ]  # fmt: skip
        rows.append(
            ["total", f"{sum(float(r[1]) for r in rows):.2f}",
             f"{budget['total_us_per_delivery']:,.0f}",
             f"{budget['total_cores_at_target_rate']:.2f}"]
        )  # fmt: skip
        print(format_table(["part", "CPU s", "us per delivery", "cores needed"], rows))
        print(f"(the load generator itself used {budget['seconds'].get('bench', 0):.2f} s)\n")
    passed = result["pass"]
    targets = [
        [
            "projector events/s",
            f"{one['events_per_s']:,.0f}",
            f">= {TARGET_EVENTS_PER_S:,.0f}",
            verdict(passed["events_per_s"]),
        ]
    ]
    if two:
        targets.append(
            [
                f"lag p99 at {two['offered_deliveries_per_s']:,.0f} deliveries/s offered",
                f"{two['lag_ms']['p99']:.0f} ms",
                f"< {TARGET_LAG_P99_MS:,.0f} ms",
                verdict(passed["lag_p99_ms"]),
            ]
        )
    print(format_table(["target", "measured", "wanted", "verdict"], targets) + "\n")
    for name, found in (two or {}).get("logs", {}).items():
        if found["errors"] or found["lines"]:
            print(f"--- {name}: {found['lines']} log lines, {found['errors']} errors: "
                  f"{found['events']}")  # fmt: skip
            if found["first_error"]:
                print(f"first error: {found['first_error'][:400]}")
    print_problems(result["problems"])


# --- main ----------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, 5 s of load")
    parser.add_argument("--notifications", type=int, default=None, help="phase 1 notifications")
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, help="deliveries/s offered")
    parser.add_argument("--lag-seconds", type=int, default=None, help="seconds of load")
    parser.add_argument("--skip-lag", action="store_true", help="phase 1 only")
    parser.add_argument(
        "--history-days",
        type=int,
        default=30,
        help="days of daily partitions made before the run (30: the default retention)",
    )
    add_redis_url(parser, "the benchmark")
    args = parser.parse_args()
    quick = args.quick
    args.notifications = args.notifications or (
        QUICK_NOTIFICATIONS if quick else DEFAULT_NOTIFICATIONS
    )
    args.lag_seconds = args.lag_seconds or (QUICK_LAG_SECONDS if quick else DEFAULT_LAG_SECONDS)
    if args.notifications < 1 or args.lag_seconds < 1 or args.rate <= 0:
        parser.error("--notifications, --lag-seconds and --rate must be positive")
    return args


async def postgres_version(database: Throwaway) -> str:
    connection = await asyncpg.connect(database.url)
    try:
        version: str = await connection.fetchval("SHOW server_version")
        commit: str = await connection.fetchval("SHOW synchronous_commit")
    finally:
        await connection.close()
    return f"{version} (synchronous_commit {commit})"


async def table_bytes(pool: asyncpg.Pool) -> dict[str, int]:
    """The bytes of each read-model table on disk: its partitions, indexes and TOAST."""
    async with pool.acquire() as connection:
        await connection.execute("VACUUM ANALYZE")  # the visibility and free-space maps too
        return {
            table: int(
                await connection.fetchval(
                    "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) "
                    "FROM pg_partition_tree($1::regclass)",
                    table,
                )
            )
            for table in ("notification", "delivery", "delivery_event")
        }


async def hold_history(database: Throwaway, days: int) -> None:
    """The daily partitions of ``days`` days before today, as a service that has run that
    long holds them (``CLARION_RETENTION_DAYS``, 30 by default): a query or an insert that
    plans for every partition costs more with each one."""
    pool = await connect_database(database.url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as connection:
            today = datetime.now(UTC).date()
            for back in range(days, 0, -4):  # each call makes the day before and 3 after
                await ensure_partitions(connection, today - timedelta(days=back))
    finally:
        await pool.close()


async def reset(database: Throwaway) -> None:
    pool = await asyncpg.create_pool(database.url, min_size=1, max_size=1)
    try:
        await truncate_read_model(pool)
    finally:
        await pool.close()


def main() -> int:
    args = parse_args()
    started = datetime.now(UTC)
    prefix = f"bench-{secrets.token_hex(6)}"
    client = redis.Redis.from_url(args.redis_url)
    result: dict[str, Any] = {
        **result_head("projector", started, client),
        "parameters": {
            "cpu_count": os.cpu_count(),
            "notifications": args.notifications,
            "throughput_mix": "1/5 otp (2 events per notification), 1/5 order_confirmed with "
            "2 push tokens (5), 3/5 order_confirmed with 1 (4); one DeliverySent per delivery",
            "offered_deliveries_per_s": args.rate,
            "lag_seconds": args.lag_seconds,
            "lag_mix": "pipeline.py end to end: 4/5 order_confirmed (3 deliveries), 1/5 otp",
            "lag_sample_ms": LAG_SAMPLE_S * 1000,
            "api_workers": API_WORKERS,
            "delivery_workers": DELIVERY_WORKERS,
            "catalog": "clarion.toml without provider rate limits",
            "key_prefix": prefix,
        },
        "targets": {
            "events_per_s": TARGET_EVENTS_PER_S,
            "lag_p99_ms": TARGET_LAG_P99_MS,
        },
        "lag": {},
        "problems": [],
    }
    database = asyncio.run(create_database())
    result["parameters"]["database"] = database.name
    result["parameters"]["history_days"] = args.history_days
    try:
        result["postgres"] = asyncio.run(postgres_version(database))
        asyncio.run(hold_history(database, args.history_days))
        with tempfile.TemporaryDirectory(prefix="clarion-projector-") as temp:
            catalog = Path(temp) / "clarion.toml"
            unlimited_catalog(REPO / "clarion.toml", catalog)
            print("1. projector throughput:", flush=True)
            result["throughput"], problems = uvloop.run(
                measure_throughput(
                    args.redis_url, database, f"{prefix}-p1", catalog, args.notifications
                )
            )
            result["problems"] += problems
            one = result["throughput"]
            print(f"  {one['events_per_s']:,.0f} events/s", flush=True)
            if not args.skip_lag:
                asyncio.run(reset(database))
                print("2. projection lag under load:", flush=True)
                result["lag"], problems = measure_lag(
                    args, database, f"{prefix}-p2", catalog, Path(temp)
                )
                result["problems"] += problems
    finally:
        deleted = delete_prefix(client, prefix)
        client.close()
        asyncio.run(drop_database(database))
        print(f"deleted {deleted} Redis keys under {prefix}*, dropped {database.name}", flush=True)
    ok = not result["problems"]
    lag = result["lag"]
    result["pass"] = {
        "no_problems": ok,
        "events_per_s": ok and result["throughput"]["events_per_s"] >= TARGET_EVENTS_PER_S,
        "lag_p99_ms": ok and bool(lag) and lag["lag_ms"]["p99"] < TARGET_LAG_P99_MS,
    }
    print_report(result)
    write_result("projector", result, started)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
