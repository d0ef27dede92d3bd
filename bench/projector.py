"""Projector benchmark: events into PostgreSQL, alone and behind the running pipeline.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/projector.py            # 50,000 notifications; 30 s of load
    .venv/bin/python bench/projector.py --quick    # 10,000 notifications; 10 s

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
2. Projection lag at a sustainable rate: the API (``clarion api --workers 2``), two
   delivery workers and ``clarion projector`` run as processes against the database.
   First their end-to-end capacity: ``--capacity-batches`` (30; 8 with ``--quick``) batches
   of 1000 notifications (pipeline.py's end-to-end mix, 2.6 deliveries each) posted
   unpaced, 4 at a time, and deliveries/s from the first batch's send to the last sandbox
   ``sent`` record; the projector runs meanwhile and is waited for. Then 70 % of that
   capacity (or ``--rate`` deliveries/s) is offered in batches at a steady pace for
   ``--lag-seconds`` (30; 10), until everything is delivered and projected; the read model
   is then compared with the stream. (Offered a fixed rate above what it can do, the
   pipeline builds a backlog, and a lag figure then measures mostly work waiting for the
   workers, not the projection.)

   The projection's own lag, per event: from the event written (its ``events`` entry id's
   ms) until its row is visible in PostgreSQL. A probe (``VisibilityProbe``) reads every
   5th entry of the stream as it is written and looks for its first event's
   ``delivery_event`` row every 20 ms, all the entries it waits for in one query; the time
   the answer came back is the entry's "visible" time. So the figure is late by at most
   the gap between two queries (reported as ``resolution_ms``: 20 ms and more when the
   machine is busy) and counts each probed entry once per event it holds. The target:
   p99 < 500 ms. Beside it, ``projections.queries.projection_lag_ms`` is sampled every
   100 ms, as before, under its meaning: the age of the oldest event not yet projected,
   which includes any backlog (``oldest_unprojected_age_ms``). The CPU each process used
   during the steady load is read from ``/proc``, per delivery and scaled to 10,000
   deliveries/s.

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
from dataclasses import dataclass
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
    CpuSnapshot,
    Ingested,
    SandboxRecord,
    StreamEvents,
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
    entry_ms,
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
    percentile,
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
from streams.core import codec
from streams.core.consumer_groups import PROJECTOR_GROUP
from streams.core.keys import KeySpace, ShardKeys

DEFAULT_NOTIFICATIONS = 50_000
QUICK_NOTIFICATIONS = 10_000
DEFAULT_LAG_SECONDS = 30
QUICK_LAG_SECONDS = 10
DEFAULT_CAPACITY_BATCHES = 30  # of 1000 notifications (2,600 deliveries) each
QUICK_CAPACITY_BATCHES = 8
CAPACITY_CONCURRENCY = 4  # batch requests in flight while measuring capacity (pipeline.py's)
LOAD_SHARE = 0.7  # of the measured end-to-end capacity offered in the lag phase
INGEST_CHUNK = 1000  # notifications per ingest_many call
LAG_CONCURRENCY = 8  # batch requests in flight at most while pacing
PROBE_EVERY = 5  # every 5th entry of the events stream is followed into PostgreSQL
PROBE_POLL_S = 0.02  # how often the probe looks for its entries' rows
PROBE_READ_COUNT = 500  # entries per XRANGE while the probe reads new entries
OLDEST_SAMPLE_S = 0.1  # how often projection_lag_ms (the oldest unprojected event) is read
POLL_S = 0.01  # how often phase 1 checks whether the projector is done
DELIVERY_WORKERS = 2
API_WORKERS = 2
STALL_TIMEOUT_S = 30.0
PRODUCER = "bench"

TARGET_EVENTS_PER_S = 50_000.0
TARGET_LAG_P99_MS = 500.0
# The rate the lag phase's CPU per delivery is scaled to (pipeline.py's end-to-end target):
# the cores each part would need for it.
CPU_REFERENCE_RATE = 10_000.0


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
                if outcome.error is not None:
                    refused += 1
                    first_refusal = first_refusal or repr(outcome.error)
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


async def paced_ingest(
    base_url: str, rate: float, seconds: int, tag: str
) -> tuple[Ingested, int, float]:
    """Post 1000-item batches evenly spaced to offer ``rate`` deliveries/s for ``seconds``.

    Returns what was accepted, how many batches started late (all slots were busy) and the
    seconds the batches were offered for (one interval each: about ``seconds``).
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
    return total, late, batches * interval


class OldestUnprojectedSampler:
    """``projection_lag_ms`` every ``OLDEST_SAMPLE_S`` s: (seconds since start, ms).

    That figure (what ``GET /v1/ops/lag`` and ``clarion status`` report) is the age of the
    oldest event the projector has not finished: it includes the time an event waits behind
    others, so it measures backlog as much as projection. Kept beside the probe's figure
    (``VisibilityProbe``), which is the projection's own lag.
    """

    def __init__(self, client: aredis.Redis, keys: KeySpace) -> None:
        self.client = client
        self.keys = keys
        self.samples: list[tuple[float, int]] = []
        self.errors = 0
        self.started = time.monotonic()
        self._stop = asyncio.Event()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    async def run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                lag = await projection_lag_ms(self.client, self.keys)
            except redis.RedisError:
                self.errors += 1
            else:
                self.samples.append((self.elapsed(), lag))
            next_at += OLDEST_SAMPLE_S
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()

    def summary(self, until: float | None = None) -> dict[str, float]:
        values = [float(lag) for at, lag in self.samples if until is None or at <= until]
        return latency_summary(values)


# Which of the probed events' rows are visible. ``at`` leads delivery_event's primary key
# (at, event_id) and picks the day's partition: the lookup is a few index probes.
VISIBLE_EVENTS = """
SELECT event_id FROM delivery_event WHERE at = ANY($1::timestamptz[]) AND event_id = ANY($2)
"""


class _Timed(msgspec.Struct):
    at: datetime  # an event's time; every other field is skipped


_event_times = msgspec.json.Decoder(list[_Timed])


@dataclass(frozen=True, slots=True)
class _Probe:
    """A probed entry: its first event's row key, when it was written, how many events."""

    at: datetime
    written_ms: int
    events: int


class VisibilityProbe:
    """The projection's own lag: from an event written to the ``events`` stream until its
    row is visible in PostgreSQL, for every ``PROBE_EVERY``-th entry after ``after``.

    Every ``PROBE_POLL_S`` a round reads the entries written since the last one (XRANGE,
    outside the projector's group), keeps every ``PROBE_EVERY``-th, and asks PostgreSQL in
    one query which of the kept entries not seen yet have their first event's
    ``delivery_event`` row (``projections.rows.event_id``). The projector writes all rows of
    an entry, and its checkpoint, in one transaction, so that row stands for the entry's
    other rows (``notification``, ``delivery``). The lag is the time the answer came back
    minus the entry id's ms (Redis stamped it on this machine's clock): an upper bound, late
    by at most about the gap from one query's start to the next one's answer (reported as
    ``resolution_ms``: ``PROBE_POLL_S`` plus the query, more while this process is busy
    posting batches). It counts once per event of the entry.

    The rows themselves are looked for rather than a time the projector records: the read
    model has no commit time (the checkpoint's ``updated_at`` is ``now()``, the
    transaction's start), and the figure then rests on nothing the projector says about
    itself.
    """

    def __init__(
        self, client: aredis.Redis, pool: asyncpg.Pool, shard: ShardKeys, after: str
    ) -> None:
        self.client = client
        self.pool = pool
        self.stream = shard.events
        self.shard = shard.shard
        self.last_id = after
        self.entries_read = 0
        self.waiting: dict[str, _Probe] = {}  # event id of an entry's first event -> probe
        self.seen: list[tuple[float, int]] = []  # (lag ms, events of the entry)
        self.query_ms: list[float] = []
        self.gaps_ms: list[float] = []  # from one query's start to the next one's answer
        self._asked_ms: float | None = None
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Probe until ``stop()``, then one more round for what was written meanwhile."""
        async with self.pool.acquire() as connection:
            while True:
                stopping = self._stop.is_set()
                round_ends = time.monotonic() + PROBE_POLL_S
                await self._read_new()
                if self.waiting:
                    await self._look(connection)
                else:
                    self._asked_ms = None  # the next query's gap starts anew
                if stopping:
                    return
                await asyncio.sleep(max(0.0, round_ends - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()

    async def _read_new(self) -> None:
        field = codec.EVENT_FIELD.encode()
        while True:
            chunk: Any = await self.client.xrange(
                self.stream, f"({self.last_id}", "+", count=PROBE_READ_COUNT
            )
            for raw_id, fields in chunk:
                self.entries_read += 1
                if self.entries_read % PROBE_EVERY:
                    continue
                entry_id = raw_id.decode()
                events = _event_times.decode(fields.get(field, b"[]"))
                if events:
                    first = rows_module.event_id(self.shard, entry_id, 0)
                    self.waiting[first] = _Probe(events[0].at, entry_ms(entry_id), len(events))
            if chunk:
                self.last_id = chunk[-1][0].decode()
            if len(chunk) < PROBE_READ_COUNT:
                return

    async def _look(self, connection: asyncpg.Connection) -> None:
        ids = list(self.waiting)
        ats = [self.waiting[event].at for event in ids]
        asked_ms = time.time() * 1000
        visible = await connection.fetch(VISIBLE_EVENTS, ats, ids)
        answered_ms = time.time() * 1000
        self.query_ms.append(answered_ms - asked_ms)
        if self._asked_ms is not None:
            self.gaps_ms.append(answered_ms - self._asked_ms)
        self._asked_ms = asked_ms
        for row in visible:
            probe = self.waiting.pop(row["event_id"])
            self.seen.append((answered_ms - probe.written_ms, probe.events))

    def summary(self) -> dict[str, Any]:
        per_event = [lag for lag, events in self.seen for _ in range(events)]
        return {
            **latency_summary(per_event),
            "p95": round(percentile(per_event, 95), 1),
            "entries_read": self.entries_read,
            "entries_probed": len(self.seen) + len(self.waiting),
            "entries_never_seen": len(self.waiting),
            "probe_every_entries": PROBE_EVERY,
            "poll_interval_ms": PROBE_POLL_S * 1000,
            "queries": len(self.query_ms),
            "query_ms": latency_summary(self.query_ms),
            # A row seen in one answer was not there when the query before it started:
            # this gap bounds how late the answer can be.
            "resolution_ms": latency_summary(self.gaps_ms),
        }


async def wait_delivered(client: aredis.Redis, keys: KeySpace, target: int) -> bool:
    """Wait until the sandbox holds ``target`` records and no work is left."""

    async def delivered() -> bool:
        sent = await client.xlen(keys.sandbox_sent)
        return sent >= target and remaining_work(await work_state(client, keys)) == 0

    return await wait_for(delivered, STALL_TIMEOUT_S + target / 2000)


async def wait_projected(
    client: aredis.Redis, pool: asyncpg.Pool, keys: KeySpace
) -> tuple[bool, StreamEvents]:
    """Wait until the projector has every event of the stream in ``delivery_event``."""
    contents = await stream_events(client, keys.shard(0).events)

    async def projected() -> bool:
        if await projection_lag_ms(client, keys):
            return False
        async with pool.acquire() as connection:
            rows = await connection.fetchval("SELECT count(*) FROM delivery_event")
        return int(rows) >= contents.events

    caught_up = await wait_for(projected, STALL_TIMEOUT_S + contents.events / 10_000)
    return caught_up, contents


def deliveries_per_s(
    queued: dict[str, str], record: SandboxRecord, from_ms: float, at_least_s: float = 0.0
) -> float:
    """The ``queued`` deliveries sent, per second from ``from_ms`` (wall clock) to the last
    sent record, or per ``at_least_s`` if that is longer: a paced load's deliveries count
    over the time they were offered in, even when its last batch is all sent sooner."""
    sending_s = (record.last_sent_ms - from_ms) / 1000 if record.last_sent_ms else 0.0
    span_s = max(sending_s, at_least_s)
    sent = sum(1 for d in queued if d in record.first_sent_ms)
    return round(sent / span_s, 1) if span_s > 0 else 0.0


async def measure_capacity(
    base_url: str, client: aredis.Redis, keys: KeySpace, batches: int
) -> tuple[dict[str, Any], Ingested, list[str]]:
    """End-to-end capacity with every service running (the projector too): ``batches``
    batches of pipeline.py's mix posted unpaced, ``CAPACITY_CONCURRENCY`` at a time;
    deliveries/s from the first batch's send to the last sandbox ``sent`` record."""
    after = await last_entry_id(client, keys.sandbox_sent)
    target = await client.xlen(keys.sandbox_sent)
    pieces = batch_pieces(BATCH_SIZE, e2e_item)
    print(f"  measuring capacity: {batches} batches of {BATCH_SIZE} unpaced ...", flush=True)
    sent_from_ms = time.time() * 1000
    async with api_client(base_url, CAPACITY_CONCURRENCY, keepalive=False) as http:
        ingested = await post_batches(
            http, pieces, batches, f"{keys.prefix}-capacity", CAPACITY_CONCURRENCY
        )
    drained = await wait_delivered(client, keys, target + len(ingested.queued))
    record = await read_sandbox(client, keys.sandbox_sent, after)
    checked, problems = check_deliveries(ingested.queued, record, "capacity burst")
    if ingested.refused or ingested.failed_requests:
        problems.append(f"capacity burst ingest: {ingested.first_problem}")
    if not drained:
        problems.append("capacity burst: the delivery workers did not finish in time")
    return (
        {
            **ingested.summary(),
            **checked,
            "batches": batches,
            "concurrency": CAPACITY_CONCURRENCY,
            "span_s": round((record.last_sent_ms - sent_from_ms) / 1000, 3),
            "deliveries_per_s": deliveries_per_s(ingested.queued, record, sent_from_ms),
        },
        ingested,
        problems,
    )


async def steady_load(
    base_url: str,
    client: aredis.Redis,
    pool: asyncpg.Pool,
    keys: KeySpace,
    load: tuple[float, int],
    read_cpu: Callable[[], CpuSnapshot],
) -> tuple[dict[str, Any], Ingested, list[str]]:
    """Offer ``load`` (deliveries/s, seconds) at a steady pace with the probe and the
    sampler running, until everything is delivered and projected; the CPU each process used
    meanwhile."""
    rate, seconds = load
    stream = keys.shard(0).events
    after = await last_entry_id(client, keys.sandbox_sent)
    target = await client.xlen(keys.sandbox_sent)
    probe = VisibilityProbe(client, pool, keys.shard(0), await last_entry_id(client, stream))
    oldest = OldestUnprojectedSampler(client, keys)
    tasks = [asyncio.create_task(probe.run()), asyncio.create_task(oldest.run())]
    print(f"  offering {rate:,.0f} deliveries/s for {seconds} s ...", flush=True)
    cpu_before = read_cpu()
    sent_from_ms = time.time() * 1000
    ingested, late, offered_s = await paced_ingest(base_url, rate, seconds, keys.prefix)
    load_end = oldest.elapsed()
    drained = await wait_delivered(client, keys, target + len(ingested.queued))
    drained_at = oldest.elapsed()
    caught_up, contents = await wait_projected(client, pool, keys)
    caught_up_at = oldest.elapsed()
    cpu = cpu_budget(read_cpu().used(cpu_before), len(ingested.queued))
    probe.stop()
    oldest.stop()
    await asyncio.gather(*tasks)
    record = await read_sandbox(client, keys.sandbox_sent, after)
    checked, problems = check_deliveries(ingested.queued, record, "lag phase")
    result = {
        **ingested.summary(),
        **checked,
        "batches_started_late": late,
        "ingest_deliveries_per_s": round(len(ingested.queued) / ingested.elapsed_s, 1),
        "offered_for_s": round(offered_s, 3),
        "end_to_end_deliveries_per_s": deliveries_per_s(
            ingested.queued, record, sent_from_ms, offered_s
        ),
        "load_end_s": round(load_end, 3),
        "drained": drained,
        "delivered_all_at_s": round(drained_at, 3),
        "caught_up": caught_up,
        "caught_up_at_s": round(caught_up_at, 3),
        "stream": contents.summary(),
        "projection_lag_ms": probe.summary(),
        "oldest_unprojected_age_ms": oldest.summary(),
        "oldest_unprojected_age_ms_during_load": oldest.summary(load_end),
        "oldest_unprojected_age_ms_by_second": worst_by_second(oldest.samples),
        "oldest_unprojected_sample_errors": oldest.errors,
        "cpu": cpu,
    }
    return result, ingested, problems + steady_problems(result)


def steady_problems(result: dict[str, Any]) -> list[str]:
    """What makes the steady load's figures untrustworthy, from its result."""
    problems = []
    lag = result["projection_lag_ms"]
    if result["items_refused"] or result["failed_requests"]:
        problems.append(f"lag phase ingest: {result['first_problem']}")
    if not result["drained"]:
        problems.append("lag phase: the delivery workers did not finish within the timeout")
    if not result["caught_up"]:
        problems.append("lag phase: the projector did not catch up within the timeout")
    if lag["entries_never_seen"] or not lag["count"]:
        problems.append(
            f"lag phase: {lag['entries_probed']} entries probed, the rows of "
            f"{lag['entries_never_seen']} never seen"
        )
    if result["oldest_unprojected_sample_errors"]:
        problems.append(
            f"lag phase: {result['oldest_unprojected_sample_errors']} samples of "
            "projection_lag_ms failed"
        )
    return problems


def read_model_problems(counts: dict[str, Any], events: int, parts: list[Ingested]) -> list[str]:
    """The read model against the ``events`` of the stream and what the API accepted in
    ``parts``."""
    problems = []
    if counts["delivery_event"] != events:
        problems.append(
            f"lag phase: {counts['delivery_event']} rows in delivery_event, "
            f"{events} events in the stream"
        )
    if counts["notification"] != sum(part.notifications for part in parts):
        problems.append(f"lag phase: {counts['notification']} notification rows")
    if counts["delivery_by_status"].get("SENT", 0) != sum(len(part.queued) for part in parts):
        problems.append(f"lag phase: delivery rows by status {counts['delivery_by_status']}")
    return problems


async def drive_lag(
    base_url: str,
    redis_url: str,
    database: Throwaway,
    keys: KeySpace,
    args: argparse.Namespace,
    read_cpu: Callable[[], CpuSnapshot],
) -> tuple[dict[str, Any], list[str]]:
    """Measure the capacity, offer ``LOAD_SHARE`` of it (or ``--rate``) at a steady pace,
    then check the read model against the stream."""
    client = aredis.Redis.from_url(redis_url)
    pool = await asyncpg.create_pool(database.url, min_size=1, max_size=3)
    try:
        capacity, burst, problems = await measure_capacity(
            base_url, client, keys, args.capacity_batches
        )
        settled, before = await wait_projected(client, pool, keys)
        if not settled:
            problems.append("capacity burst: the projector did not catch up within the timeout")
        rate = args.rate or round(LOAD_SHARE * capacity["deliveries_per_s"], 1)
        if rate <= 0:
            raise BenchError(f"the capacity burst delivered nothing: {problems}")
        steady, ingested, more = await steady_load(
            base_url, client, pool, keys, (rate, args.lag_seconds), read_cpu
        )
        counts = await row_counts(pool)
        state = await work_state(client, keys)
    finally:
        await pool.close()
        await client.aclose()
    events = steady["stream"]["events"]
    problems += more + read_model_problems(counts, events, [burst, ingested])
    return {
        "capacity": capacity,
        "capacity_deliveries_per_s": capacity["deliveries_per_s"],
        "rate_from": "--rate" if args.rate else f"{LOAD_SHARE:.0%} of the measured capacity",
        "offered_deliveries_per_s": rate,
        **steady,
        # The events the steady load made, per second until its last delivery was sent.
        "events_written": events - before.events,
        "events_per_s_written": round(
            (events - before.events) / max(steady["delivered_all_at_s"], 1e-3), 1
        ),
        "rows": counts,
        "pending_work_at_end": pending_total(state),
    }, problems


def cpu_budget(used: dict[str, float], deliveries: int) -> dict[str, Any]:
    """CPU seconds each part used for the steady load (from the first request until the
    projector caught up), per delivery, and the cores each part would need at
    ``CPU_REFERENCE_RATE``."""
    parts = {name: seconds for name, seconds in used.items() if name != "bench"}
    per_delivery = {
        name: round(seconds * 1e6 / max(1, deliveries), 1) for name, seconds in parts.items()
    }
    total = sum(parts.values())
    return {
        "seconds": used,
        "us_per_delivery": per_delivery,
        "reference_deliveries_per_s": CPU_REFERENCE_RATE,
        "cores_at_reference_rate": {
            name: round(seconds * CPU_REFERENCE_RATE / max(1, deliveries), 2)
            for name, seconds in parts.items()
        },
        "total_us_per_delivery": round(total * 1e6 / max(1, deliveries), 1),
        "total_cores_at_reference_rate": round(total * CPU_REFERENCE_RATE / max(1, deliveries), 2),
        "note": "bench (the load generator and the probe) is not counted in the totals; "
        "postgresql includes the probe's queries",
    }


def worst_by_second(samples: list[tuple[float, int]]) -> list[int]:
    """The largest sample of each second since sampling started."""
    worst: dict[int, int] = {}
    for at, value in samples:
        worst[int(at)] = max(worst.get(int(at), 0), value)
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
            result, problems = asyncio.run(
                drive_lag(
                    base_url, args.redis_url, database, keys, args,
                    lambda: cpu_snapshot(services, server),
                )
            )  # fmt: skip
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
        print_lag(two, params)
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
                f"projection lag p99 at {two['offered_deliveries_per_s']:,.0f} deliveries/s",
                f"{two['projection_lag_ms']['p99']:.0f} ms",
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


def print_lag(two: dict[str, Any], params: dict[str, Any]) -> None:
    """Phase 2's part of the report: capacity, the steady load, the lag, the CPU."""
    capacity, lag = two["capacity"], two["projection_lag_ms"]
    oldest, during = two["oldest_unprojected_age_ms"], two["oldest_unprojected_age_ms_during_load"]
    print(
        f"2. Pipeline as processes (API x{API_WORKERS}, {DELIVERY_WORKERS} workers, "
        f"projector): capacity {two['capacity_deliveries_per_s']:,.0f} deliveries/s "
        f"({capacity['batches']} batches unpaced, {capacity['deliveries_queued']:,} deliveries "
        f"in {capacity['span_s']:.1f} s); then {two['offered_deliveries_per_s']:,.0f}/s "
        f"offered ({two['rate_from']}) for {params['lag_seconds']} s"
    )
    rows = [
        ["deliveries queued", f"{two['deliveries_queued']:,}"],
        ["ingest deliveries/s (achieved)", f"{two['ingest_deliveries_per_s']:,.0f}"],
        ["end-to-end deliveries/s (to SENT)", f"{two['end_to_end_deliveries_per_s']:,.0f}"],
        ["batches started late", str(two["batches_started_late"])],
        ["events in stream / rows", f"{two['stream']['events']:,} / "
         f"{two['rows']['delivery_event']:,}"],
        ["projection lag p50/p95/p99/max", f"{lag['p50']:.0f} / {lag['p95']:.0f} / "
         f"{lag['p99']:.0f} / {lag['max']:.0f} ms"],
        ["  probed", f"{lag['entries_probed']:,} of {lag['entries_read']:,} entries, "
         f"{lag['count']:,} events; every {lag['poll_interval_ms']:.0f} ms, query p50 "
         f"{lag['query_ms']['p50']:.1f} ms"],
        ["oldest unprojected age p50/p99/max", f"{oldest['p50']:.0f} / {oldest['p99']:.0f} / "
         f"{oldest['max']:.0f} ms (during load: p99 {during['p99']:.0f} ms)"],
        ["load ended / delivered / caught up", f"{two['load_end_s']:.1f} / "
         f"{two['delivered_all_at_s']:.1f} / {two['caught_up_at_s']:.1f} s"],
        ["caught up (lag 0, rows = events)", "yes" if two["caught_up"] else "NO"],
        ["lost / duplicated deliveries", f"{two['deliveries_missing']} / "
         f"{two['repeated_sends'] + two['sandbox_flagged_duplicates']}"],
    ]  # fmt: skip
    print(format_table(["what", "measured"], rows))
    print(f"oldest unprojected age, max per second (ms): "
          f"{two['oldest_unprojected_age_ms_by_second']}\n")  # fmt: skip
    budget = two["cpu"]
    print(
        f"CPU used from the first paced request until caught up, per delivery, and the cores "
        f"each part would need at {CPU_REFERENCE_RATE:,.0f} deliveries/s "
        f"({params['cpu_count']} here):"
    )
    rows = [
        [name, f"{seconds:.2f}", f"{budget['us_per_delivery'][name]:,.0f}",
         f"{budget['cores_at_reference_rate'][name]:.2f}"]
        for name, seconds in budget["seconds"].items() if name != "bench"
    ]  # fmt: skip
    rows.append(
        ["total", f"{sum(float(r[1]) for r in rows):.2f}",
         f"{budget['total_us_per_delivery']:,.0f}",
         f"{budget['total_cores_at_reference_rate']:.2f}"]
    )  # fmt: skip
    print(format_table(["part", "CPU s", "us per delivery", "cores needed"], rows))
    print(f"(the load generator and the probe used {budget['seconds'].get('bench', 0):.2f} s)\n")


# --- main ----------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, 10 s of steady load")
    parser.add_argument("--notifications", type=int, default=None, help="phase 1 notifications")
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help=f"deliveries/s offered in the lag phase (default: {LOAD_SHARE:.0%} of the "
        "capacity it measures first)",
    )
    parser.add_argument("--lag-seconds", type=int, default=None, help="seconds of steady load")
    parser.add_argument(
        "--capacity-batches",
        type=int,
        default=None,
        help=f"batches of {BATCH_SIZE} posted unpaced to measure the capacity "
        f"(default {DEFAULT_CAPACITY_BATCHES}, --quick {QUICK_CAPACITY_BATCHES})",
    )
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
    args.capacity_batches = args.capacity_batches or (
        QUICK_CAPACITY_BATCHES if quick else DEFAULT_CAPACITY_BATCHES
    )
    if min(args.notifications, args.lag_seconds, args.capacity_batches) < 1 or (
        args.rate is not None and args.rate <= 0
    ):
        parser.error(
            "--notifications, --lag-seconds, --capacity-batches and --rate must be positive"
        )
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
            "rate": args.rate,
            "load_share": LOAD_SHARE,
            "capacity_batches": args.capacity_batches,
            "capacity_concurrency": CAPACITY_CONCURRENCY,
            "lag_seconds": args.lag_seconds,
            "lag_mix": "pipeline.py end to end: 4/5 order_confirmed (3 deliveries), 1/5 otp",
            "probe_every_entries": PROBE_EVERY,
            "probe_poll_ms": PROBE_POLL_S * 1000,
            "oldest_unprojected_sample_ms": OLDEST_SAMPLE_S * 1000,
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
        "lag_p99_ms": ok and bool(lag) and lag["projection_lag_ms"]["p99"] < TARGET_LAG_P99_MS,
    }
    print_report(result)
    write_result("projector", result, started)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
