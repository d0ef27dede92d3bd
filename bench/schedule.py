"""Send later: release lateness at 10,000 due a second, and Redis bytes per scheduled notification.

How late scheduled deliveries go out when 10,000 come due every second, and the Redis
memory a scheduled notification holds while it waits.

Run from anywhere with the project's virtualenv (it needs Redis only)::

    .venv/bin/python bench/schedule.py                 # 60,000 due at 10,000/s; 100,000 for memory
    .venv/bin/python bench/schedule.py --quick         # 20,000 due; 20,000 for memory
    .venv/bin/python bench/schedule.py --shape second  # each second's 10,000 due at one ms
    .venv/bin/python bench/schedule.py --skip-delivery --skip-memory   # the release step alone

Notifications are ingested through ``app.ingest.ingestor.Ingestor`` (the path the HTTP API
takes), each ``order_confirmed`` on its EMAIL channel only (one NORMAL delivery) with about
200 bytes of template data and a ``send_at``: its delivery waits SCHEDULED in the shard's
``delayed`` set until then. The due times start a few seconds (``--lead``) after loading
ends and follow one another at ``--rate`` a second, spread evenly over each second
(``--shape spread``) or all of a second's at its first ms (``--shape second``, as producers
tend to schedule on the minute). Three phases, each under its own key prefix:

1. **Release alone**: nothing drains the work stream; the scheduler loops of
   ``app.delivery.scheduler`` (as many as ``--workers``, as each worker process runs one)
   run in this process and move the due members into it. Release lateness, for every
   delivery: the ms of its work entry's id minus its due time. Then a backlog of
   ``--count`` members all due at once is released, which is the scheduler's capacity.
2. **End to end**: ``--workers`` delivery worker processes (``clarion worker --slot N``, as
   ``bench/pipeline.py`` runs them; sandbox provider, no rate limits) run before and
   while the members come due. Delivery lateness, for every delivery: the ms of the
   sandbox's record of the send (its stream entry id) minus the due time; release lateness
   for every work entry a reader in this process saw (``XREAD`` on the work stream; the
   workers delete an entry once sent, so a few may go unseen). The CPU each group of
   processes spent meanwhile, and the rate the sends kept.
3. **Memory**: ``--memory-count`` notifications due a day ahead, each with a
   cancellation key of its own (the worst case for the index), are ingested with no worker
   running; ``MEMORY USAGE`` (``SAMPLES 0``) of every key they created is summed by kind (the
   ``delayed`` set's growth divided by the count is a member's share), and ``INFO memory``'s
   ``used_memory`` growth is divided by the count. From these, what scheduled notifications
   hold at the seeds' volume (50 million a day) for a share scheduled and a horizon, set
   against the Redis memory the capacity plan (``docs/running/capacity.md``) gives.

All Redis keys live under a random ``bench-<hex>`` prefix and are deleted at the end. The
result is printed and written to ``bench/results/schedule-<UTC timestamp>.json`` and ``.md``,
which replace the older schedule results there. The exit status is 1 when a delivery was
lost or duplicated, an item was refused, work was left behind or a worker logged an error;
missing the lateness target alone is not.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from unittest.mock import patch

import msgspec
import redis.asyncio as aredis

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.catalog import Catalog, load_catalog
from app.delivery import scheduler as scheduler_module
from app.delivery.scheduler import Scheduler
from app.ingest.ingestor import Ingestor
from app.ingest.requests import NotificationRequest
from app.logging import configure_logging
from app.settings import Settings
from bench.harness import (
    REPO,
    SCAN_CHUNK,
    BenchError,
    CpuSnapshot,
    add_redis_url,
    check_deliveries,
    clarion_executable,
    cpu_snapshot,
    delete_prefix,
    entry_ms,
    free_port,
    in_process,
    latency_summary,
    log_findings,
    print_problems,
    read_sandbox,
    redis_pid,
    remaining_work,
    result_head,
    result_stem,
    running,
    service_env,
    shown,
    unlimited_catalog,
    wait_consumers,
    work_state,
    write_result,
)
from streams.core import codec
from streams.core.connection import connect, connect_sync
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.delayed import MOVE_LIMIT, Moved, move_due
from streams.ingest.writer import SHARED_DATA_SLACK_MS

KIND: Final = "schedule"
PRODUCER: Final = "bench"
TYPE: Final = "order_confirmed"  # NORMAL; its EMAIL channel only
PRIORITY: Final = Priority.NORMAL
CHUNK: Final = 1000  # notifications per ingest_many call
CALIBRATION: Final = 2000  # notifications ingested first to time the loading
DEFAULT_COUNT, DEFAULT_RATE, DEFAULT_LEAD_S = 60_000, 10_000, 3.0
DEFAULT_MEMORY_COUNT: Final = 100_000
DEFAULT_WORKERS: Final = 2  # the configuration Clarion ships for two cores
MEMORY_HORIZON_MS: Final = 86_400_000  # the memory phase's notifications are due a day ahead
STALL_TIMEOUT_S: Final = 20.0
POLL_S: Final = 0.05
TARGET_RELEASE_P99_MS: Final = 1000.0

# The seeds' volume and the capacity plan's Redis (docs/running/capacity.md): six masters of
# 32 GB; the steady state of notifications sent at once takes 45 GB, a ten-minute peak 30 GB,
# the rest is headroom for a projector or PostgreSQL outage.
DAY_S: Final = 86_400
DAILY_VOLUME: Final = 50_000_000
REDIS_BUDGET_GB: Final = 192.0
STEADY_STATE_GB: Final = 45.0
PEAK_GB: Final = 30.0
IDEMPOTENCY_TTL_S: Final = 86_400  # how long a record lives anyway (CLARION_IDEMPOTENCY_TTL)
# (share of the daily volume scheduled, average horizon in days): the assumption, a longer
# one, and the worst case the API allows (CLARION_MAX_SCHEDULE, 30 days).
SCENARIOS: Final = ((0.10, 1.0), (0.10, 7.0), (0.10, 30.0), (0.50, 1.0), (1.00, 30.0))

DATA_PAD: Final = "2 x Espresso beans 1 kg, 1 x Milk frother, 1 x Descaler; total 89.70 EUR"


# --- requests and due times ----------------------------------------------------------------


def request(i: int, due_ms: int, *, cancellation_key: str | None = None) -> NotificationRequest:
    """Notification ``i``, due at ``due_ms`` (0: sent at once): one EMAIL delivery, ~200
    bytes of data."""
    return msgspec.convert(
        {
            "recipient": {"id": f"user-{i}", "email": f"user{i}@example.com"},
            "type": TYPE,
            "channels": ["EMAIL"],
            "data": {
                "order_id": f"A-{i:09d}",
                "customer": "Jane Example",
                "items": DATA_PAD,
                "delivery": "DHL Express, arrives Tuesday",
            },
            "send_at": datetime.fromtimestamp(due_ms / 1000, UTC) if due_ms else None,
            "cancellation_key": cancellation_key,
        },
        NotificationRequest,
    )


def data_bytes() -> int:
    """The size of one notification's template data, JSON-encoded."""
    return len(msgspec.json.encode(request(0, 10**13).data))


def due_times(start_ms: int, count: int, rate: int, shape: str) -> list[int]:
    """``count`` due times from ``start_ms``, ``rate`` a second: spread evenly over each second
    (``spread``) or every second's at its first ms (``second``)."""
    if shape == "second":
        return [start_ms + (i // rate) * 1000 for i in range(count)]
    return [start_ms + (i * 1000) // rate for i in range(count)]


# --- loading -------------------------------------------------------------------------------


@dataclass
class Loaded:
    """What was ingested: delivery id -> due ms, and what went wrong."""

    due_ms: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    first_problem: str = ""
    elapsed_s: float = 0.0


class _Delivery(msgspec.Struct):
    id: str
    status: str


class _Answer(msgspec.Struct):
    id: str
    deliveries: list[_Delivery]


_answer = msgspec.json.Decoder(_Answer)


async def load(ingestor: Ingestor, tag: str, due: Sequence[int], *, keyed: bool = False) -> Loaded:
    """Ingest one notification per due time (idempotency keys ``<tag>-<i>``)."""
    loaded = Loaded()
    started = time.perf_counter()
    for first in range(0, len(due), CHUNK):
        entries: list[tuple[str, NotificationRequest | Any]] = [
            (
                f"{tag}-{i}",
                request(i, due[i], cancellation_key=f"{tag}-c{i}" if keyed else None),
            )
            for i in range(first, min(len(due), first + CHUNK))
        ]
        answers = await ingestor.ingest_many(PRODUCER, entries, overlap=True)
        for (key, _), answer in zip(entries, answers, strict=True):
            if answer.error is not None:
                loaded.refused += 1
                loaded.first_problem = loaded.first_problem or f"{key}: {answer.error!r}"
                continue
            index = int(key.rsplit("-", 1)[1])
            for delivery in _answer.decode(answer.response).deliveries:
                loaded.statuses[delivery.status] += 1
                loaded.due_ms[delivery.id] = due[index]
    loaded.elapsed_s = time.perf_counter() - started
    return loaded


async def redis_ms(client: aredis.Redis) -> int:
    """Now by the Redis clock (the one the scheduler and the stream ids go by)."""
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def calibrate(redis_url: str, prefix: str, catalog: Catalog) -> float:
    """Notifications/s this process ingests, timed on ``CALIBRATION`` of them under a
    prefix of their own (deleted after)."""
    client = connect(redis_url)
    try:
        ingestor, _ = in_process(client, KeySpace(prefix), catalog)
        due = [await redis_ms(client) + 3_600_000] * CALIBRATION
        loaded = await load(ingestor, f"{prefix}-cal", due)
    finally:
        await client.aclose()
    return CALIBRATION / max(loaded.elapsed_s, 1e-3)


def start_after(rate_per_s: float, count: int, lead_s: float) -> float:
    """Seconds from now to the first due time: the estimated loading with half more (the
    machine is shared), then the lead."""
    return count / rate_per_s * 1.5 + lead_s


def lateness(at_ms: dict[str, int], due_ms: dict[str, int]) -> list[float]:
    """Per delivery in both: ``at_ms`` minus its due time."""
    return [float(at - due_ms[d]) for d, at in at_ms.items() if d in due_ms]


def rate_per_s(count: int, first_due_ms: int, last_ms: int) -> float:
    """``count`` over the time from the first due time to ``last_ms``."""
    span = (last_ms - first_due_ms) / 1000
    return count / span if span > 0 else 0.0


async def read_releases(
    client: aredis.Redis, stream: str, after: str = "-"
) -> tuple[dict[str, int], str]:
    """Delivery id -> ms of its work entry, for the entries of ``stream`` after ``after``;
    and the last id read."""
    released: dict[str, int] = {}
    start = after
    while True:
        chunk: Any = await client.xrange(stream, start, "+", count=SCAN_CHUNK)
        for raw_id, fields in chunk:
            item = codec.decode_work_item(fields[b"w"])
            released.setdefault(item.delivery_id, entry_ms(raw_id))
        if len(chunk) < SCAN_CHUNK:
            last = chunk[-1][0].decode() if chunk else after
            return released, last
        start = f"({chunk[-1][0].decode()}"


# --- phase 1: the release step alone -------------------------------------------------------


@dataclass
class SchedulerRun:
    """What the scheduler loops did: script calls, members moved, seconds, CPU."""

    calls: int = 0
    moved: int = 0
    ran_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        moved = max(self.moved, 1)
        return {
            "calls": self.calls,
            "calls_per_s": round(self.calls / max(self.ran_s, 1e-3)),
            "moved_per_call": round(self.moved / max(self.calls, 1), 1),
            "ran_s": round(self.ran_s, 2),
            "cpu_s": self.cpu_s,
            # The scheduler loops run in this process here: its CPU is theirs (and the poll
            # of ``delayed`` every 50 ms). Redis's is the server's whole, others' included.
            "cpu_us_per_release": {k: round(v / moved * 1e6, 1) for k, v in self.cpu_s.items()},
        }


async def schedulers_until_empty(
    client: aredis.Redis, keys: KeySpace, loops: int, last_due_ms: int, server: int | None
) -> SchedulerRun:
    """Run ``loops`` scheduler loops (one per worker process) until ``delayed`` is empty and
    the last due time has passed; what they did, counted by a wrapper of their script call."""
    run = SchedulerRun()

    async def counted(redis: Any, shard: Any, limit: int = MOVE_LIMIT) -> Moved:
        moved = await move_due(redis, shard, limit)
        run.calls += 1
        run.moved += moved.count
        return moved

    stopping = asyncio.Event()
    shards = keys.all_shards()
    schedulers = [Scheduler(client, shards) for _ in range(loops)]
    before = cpu_snapshot({}, server, postgres=False)
    started = time.perf_counter()
    with patch.object(scheduler_module, "move_due", counted):
        tasks = [
            asyncio.create_task(s.run(shard, stopping)) for s in schedulers for shard in shards
        ]
        try:
            while (  # noqa: ASYNC110 - state in Redis: poll it
                await client.zcard(keys.shard(0).delayed) or await redis_ms(client) < last_due_ms
            ):
                await asyncio.sleep(POLL_S)
        finally:
            stopping.set()
            for scheduler in schedulers:
                for shard in shards:
                    scheduler.wake(shard)
            await asyncio.gather(*tasks)
    run.ran_s = time.perf_counter() - started
    run.cpu_s = cpu_snapshot({}, server, postgres=False).used(before)
    return run


async def until_redis_ms(client: aredis.Redis, at_ms: int) -> None:
    """Wait until the Redis clock reaches ``at_ms``."""
    while await redis_ms(client) < at_ms:  # noqa: ASYNC110 - the Redis clock: poll it
        await asyncio.sleep(min(POLL_S, max(0.001, (at_ms - await redis_ms(client)) / 1000)))


async def measure_release(
    args: argparse.Namespace, prefix: str, catalog: Catalog, ingest_rate: float
) -> tuple[dict[str, Any], list[str]]:
    """Release lateness while nothing drains the work stream; then a backlog all due at once."""
    client = connect(args.redis_url)
    keys = KeySpace(prefix)
    shard = keys.shard(0)
    problems: list[str] = []
    server = redis_pid(args.redis_url)
    try:
        ingestor, _ = in_process(client, keys, catalog)
        first_due = await redis_ms(client) + int(
            start_after(ingest_rate, args.count, args.lead) * 1000
        )
        due = due_times(first_due, args.count, args.rate, args.shape)
        loaded = await load(ingestor, f"{prefix}-r", due)
        margin_ms = first_due - await redis_ms(client)
        if margin_ms < 500:
            problems.append(f"release: loading ended {margin_ms} ms before the first due time")
        await until_redis_ms(client, first_due - 200)  # idle loops cost nothing to count
        run = await schedulers_until_empty(client, keys, args.workers, due[-1], server)
        released, _ = await read_releases(client, shard.work(PRIORITY))
        late = lateness(released, loaded.due_ms)
        on_time = {
            "deliveries_loaded": len(loaded.due_ms),
            "released": len(released),
            "load_s": round(loaded.elapsed_s, 2),
            "load_per_s": round(len(due) / max(loaded.elapsed_s, 1e-3)),
            "margin_before_first_due_ms": margin_ms,
            "release_lateness_ms": latency_summary(late),
            "released_per_s": round(rate_per_s(len(released), due[0], max(released.values()))),
            "schedulers": run.figures(),
        }
        if len(released) != len(loaded.due_ms):
            problems.append(f"release: {len(released)} released of {len(loaded.due_ms)}")
        problems += [f"release: {p}" for p in load_problems(loaded)]
        await client.delete(shard.work(PRIORITY))  # the backlog below is read on its own
        measured_rate = len(due) / max(loaded.elapsed_s, 1e-3)
        backlog, more = await measure_backlog(
            client, keys, ingestor, args, prefix, server, min(ingest_rate, measured_rate)
        )
        problems += [f"release backlog: {p}" for p in more]
    finally:
        await client.aclose()
    return {"due_over_time": on_time, "backlog": backlog}, problems


async def measure_backlog(
    client: aredis.Redis,
    keys: KeySpace,
    ingestor: Ingestor,
    args: argparse.Namespace,
    prefix: str,
    server: int | None,
    ingest_rate: float,
) -> tuple[dict[str, Any], list[str]]:
    """``--count`` members all due at one ms already passed when the schedulers start: how
    fast they move them (the scheduler's capacity, ``MOVE_LIMIT`` a call)."""
    due_at = await redis_ms(client) + int(start_after(ingest_rate, args.count, 1.0) * 1000)
    loaded = await load(ingestor, f"{prefix}-b", [due_at] * args.count)
    await until_redis_ms(client, due_at + 1)
    start_ms = await redis_ms(client)
    run = await schedulers_until_empty(client, keys, args.workers, due_at, server)
    released, _ = await read_releases(client, keys.shard(0).work(PRIORITY))
    last = max(released.values(), default=start_ms)
    problems = load_problems(loaded)
    if len(released) != len(loaded.due_ms):
        problems.append(f"{len(released)} released of {len(loaded.due_ms)}")
    return {
        "members": len(loaded.due_ms),
        "released": len(released),
        "moved_in_ms": last - start_ms,
        "moved_per_s": round(len(released) / max((last - start_ms) / 1000, 1e-3)),
        "schedulers": run.figures(),
    }, problems


def load_problems(loaded: Loaded, expected: str = "SCHEDULED") -> list[str]:
    problems = []
    if loaded.refused:
        problems.append(f"{loaded.refused} notifications refused: {loaded.first_problem}")
    other = {s: n for s, n in loaded.statuses.items() if s != expected}
    if other:
        problems.append(f"deliveries not {expected} at acceptance: {other}")
    return problems


# --- phase 2: end to end -------------------------------------------------------------------


class Observer:
    """Reads the work stream as entries come (``XREAD BLOCK``): delivery id -> entry ms."""

    def __init__(self, client: aredis.Redis, stream: str) -> None:
        self.client, self.stream = client, stream
        self.released: dict[str, int] = {}
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        last = "0-0"
        while not self.stopping.is_set():
            reply: Any = await self.client.xread({self.stream: last}, count=SCAN_CHUNK, block=200)
            for _, entries in reply or []:
                for raw_id, fields in entries:
                    last = raw_id.decode()
                    if fields:  # deleted meanwhile: nothing left to read
                        item = codec.decode_work_item(fields[b"w"])
                        self.released.setdefault(item.delivery_id, entry_ms(raw_id))


async def wait_sent(
    client: aredis.Redis, keys: KeySpace, expected: int, deadline: float
) -> tuple[bool, dict[str, Any]]:
    """Poll until the sandbox recorded ``expected`` calls and no work is left."""
    last_progress, previous = time.monotonic(), None
    while True:
        state = await work_state(client, keys)
        sent = await client.xlen(keys.sandbox_sent)
        if sent >= expected and remaining_work(state) == 0:
            return True, state
        figures = (remaining_work(state), sent)
        now = time.monotonic()
        if figures != previous:
            previous, last_progress = figures, now
        if now - last_progress > STALL_TIMEOUT_S or now > deadline:
            return False, state
        await asyncio.sleep(POLL_S)


async def measure_e2e(
    args: argparse.Namespace,
    keys: KeySpace,
    catalog: Catalog,
    ingest_rate: float,
    snapshot: Callable[[], CpuSnapshot],
) -> tuple[dict[str, Any], list[str]]:
    """Load while the workers wait; record lateness as the members come due and go out."""
    client = connect(args.redis_url)
    observing = connect(args.redis_url)
    try:
        ingestor, _ = in_process(client, keys, catalog)
        first_due = await redis_ms(client) + int(
            start_after(ingest_rate, args.count, args.lead) * 1000
        )
        due = due_times(first_due, args.count, args.rate, args.shape)
        loaded = await load(ingestor, f"{keys.prefix}-e", due)
        margin_ms = first_due - await redis_ms(client)
        observer = Observer(observing, keys.shard(0).work(PRIORITY))
        watching = asyncio.create_task(observer.run())
        while await redis_ms(client) < first_due - 200:  # noqa: ASYNC110 - the Redis clock
            await asyncio.sleep(POLL_S)
        before = snapshot()
        timeout = (due[-1] - first_due) / 1000 + 60 + args.count / 1000
        drained, state = await wait_sent(
            client, keys, len(loaded.due_ms), time.monotonic() + timeout
        )
        used = snapshot().used(before)
        observer.stopping.set()
        await watching
        record = await read_sandbox(client, keys.sandbox_sent, "0-0")
    finally:
        await client.aclose()
        await observing.aclose()
    queued = dict.fromkeys(loaded.due_ms, "EMAIL")
    figures, problems = check_deliveries(queued, record, "end to end")
    problems += [f"end to end: {p}" for p in load_problems(loaded)]
    if margin_ms < 500:
        problems.append(f"end to end: loading ended {margin_ms} ms before the first due time")
    if not drained:
        problems.append(f"end to end: not drained; {remaining_work(state)} left")
    sent_late = lateness(record.first_sent_ms, loaded.due_ms)
    released_late = lateness(observer.released, loaded.due_ms)
    delivered = len(sent_late)
    return {
        "deliveries_loaded": len(loaded.due_ms),
        "load_s": round(loaded.elapsed_s, 2),
        "load_per_s": round(len(due) / max(loaded.elapsed_s, 1e-3)),
        "margin_before_first_due_ms": margin_ms,
        **figures,
        "drained": drained,
        "delivery_lateness_ms": latency_summary(sent_late),
        "release_lateness_ms": latency_summary(released_late),
        "releases_seen": len(released_late),
        "deliveries_per_s": round(rate_per_s(delivered, due[0], record.last_sent_ms)),
        "last_sent_after_last_due_ms": record.last_sent_ms - due[-1],
        "sends_per_second_of_run": sends_by_second(record.first_sent_ms, due[0]),
        "cpu_s": used,
        "cpu_us_per_delivery": per_delivery_us(used, delivered),
    }, problems


def sends_by_second(sent_ms: dict[str, int], first_due_ms: int) -> list[int]:
    """Sends in each second from the first due time on."""
    counts: Counter[int] = Counter((ms - first_due_ms) // 1000 for ms in sent_ms.values())
    return [
        counts.get(second, 0)
        for second in range(min(counts, default=0), max(counts, default=-1) + 1)
    ]


Measure = Callable[
    [KeySpace, Callable[[], CpuSnapshot]], Coroutine[Any, Any, tuple[dict[str, Any], list[str]]]
]


def run_e2e(
    args: argparse.Namespace, prefix: str, catalog_path: Path, logs: Path, measure: Measure
) -> tuple[dict[str, Any], list[str]]:
    """Start ``--workers`` worker processes under ``prefix``; ``measure``; stop them."""
    keys = KeySpace(prefix)
    env = service_env(prefix, args.redis_url, free_port(), catalog_path)
    clarion = str(clarion_executable())
    worker_logs = [logs / f"worker-{slot}.log" for slot in range(args.workers)]
    client = connect_sync(args.redis_url)
    try:
        with ExitStack() as stack:
            procs = [
                stack.enter_context(
                    running([clarion, "worker", "--slot", str(slot)], env, worker_logs[slot])
                )
                for slot in range(args.workers)
            ]
            wait_consumers(client, keys, procs, worker_logs)
            server = redis_pid(args.redis_url)

            def snapshot() -> CpuSnapshot:
                return cpu_snapshot({"workers": [p.pid for p in procs]}, server, postgres=False)

            result, problems = asyncio.run(measure(keys, snapshot))
            problems += [
                f"worker exited with {p.returncode}" for p in procs if p.poll() is not None
            ]
    finally:
        client.close()
    findings = {path.stem: log_findings(path) for path in worker_logs}
    result["logs"] = findings
    problems += [
        f"{name}: {f['errors']} error lines" for name, f in findings.items() if f["errors"]
    ]
    return result, problems


async def preload(args: argparse.Namespace, keys: KeySpace, catalog: Catalog) -> Loaded:
    """``--count`` notifications sent at once, loaded before the workers start."""
    client = connect(args.redis_url)
    try:
        ingestor, _ = in_process(client, keys, catalog)
        return await load(ingestor, f"{keys.prefix}-a", [0] * args.count)
    finally:
        await client.aclose()


async def measure_at_once(
    args: argparse.Namespace,
    keys: KeySpace,
    loaded: Loaded,
    snapshot: Callable[[], CpuSnapshot],
) -> tuple[dict[str, Any], list[str]]:
    """The same notifications sent at once, queued before the workers started: the rate the
    workers drain them at and their CPU, to set the scheduled ones against."""
    client = connect(args.redis_url)
    try:
        before = snapshot()
        deadline = time.monotonic() + 60 + args.count / 1000
        drained, state = await wait_sent(client, keys, len(loaded.due_ms), deadline)
        used = snapshot().used(before)
        record = await read_sandbox(client, keys.sandbox_sent, "0-0")
    finally:
        await client.aclose()
    figures, problems = check_deliveries(dict.fromkeys(loaded.due_ms, "EMAIL"), record, "at once")
    problems += [f"at once: {p}" for p in load_problems(loaded, "QUEUED")]
    if not drained:
        problems.append(f"at once: not drained; {remaining_work(state)} left")
    delivered = len(record.first_sent_ms)
    first = min(record.first_sent_ms.values(), default=0)
    return {
        **figures,
        "drained": drained,
        "deliveries_per_s": round(rate_per_s(delivered, first, record.last_sent_ms)),
        "cpu_s": used,
        "cpu_us_per_delivery": per_delivery_us(used, delivered),
    }, problems


def per_delivery_us(used: dict[str, float], delivered: int) -> dict[str, float]:
    """CPU µs a delivery per group, and the services' (all but ``bench``) total."""
    services = sum(v for k, v in used.items() if k != "bench")
    per = {k: round(v / max(delivered, 1) * 1e6, 1) for k, v in used.items()}
    return per | {"services_total": round(services / max(delivered, 1) * 1e6, 1)}


# --- phase 3: memory -----------------------------------------------------------------------


def kind_of(key: str, prefix: str) -> str:
    """``ntf``, ``idem``, ``delayed``, ``events``, ``cancel``, ``data``, … of a shard key."""
    rest = key.removeprefix(prefix + ":")
    parts = rest.split(":")
    return parts[1] if parts[0].startswith("{s") and len(parts) > 1 else parts[0]


async def memory_by_kind(client: aredis.Redis, prefix: str) -> dict[str, dict[str, int]]:
    """Keys and bytes (``MEMORY USAGE``, ``SAMPLES 0``) per kind of key under ``prefix``."""
    found: dict[str, dict[str, int]] = {}
    batch: list[str] = []

    async def measure() -> None:
        pipe = client.pipeline(transaction=False)
        for key in batch:
            pipe.memory_usage(key, samples=0)
        for key, size in zip(batch, await pipe.execute(), strict=True):
            kind = found.setdefault(kind_of(key, prefix), {"keys": 0, "bytes": 0})
            kind["keys"] += 1
            kind["bytes"] += int(size or 0)
        batch.clear()

    async for raw in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(raw.decode())
        if len(batch) >= 1000:
            await measure()
    await measure()
    return found


async def used_memory(client: aredis.Redis) -> int:
    info: Any = await client.info("memory")
    return int(info["used_memory"])


async def measure_memory(
    args: argparse.Namespace, prefix: str, catalog: Catalog
) -> tuple[dict[str, Any], list[str]]:
    """Redis bytes per notification scheduled a day ahead, by kind of key."""
    client = connect(args.redis_url)
    keys = KeySpace(prefix)
    shard = keys.shard(0)
    try:
        ingestor, _ = in_process(client, keys, catalog, Settings().idempotency_ttl_seconds)
        count = args.memory_count
        zset_before = int(await client.memory_usage(shard.delayed, samples=0) or 0)
        used_before = await used_memory(client)
        due = [await redis_ms(client) + MEMORY_HORIZON_MS] * count
        loaded = await load(ingestor, f"{prefix}-m", due, keyed=True)
        used_after = await used_memory(client)
        zset_after = int(await client.memory_usage(shard.delayed, samples=0) or 0)
        by_kind = await memory_by_kind(client, prefix)
        ttls = {
            name: int(await client.pttl(key))
            for name, key in (("delayed", shard.delayed), ("events", shard.events))
        }
    finally:
        await client.aclose()
    per = {kind: round(size["bytes"] / count, 1) for kind, size in sorted(by_kind.items())}
    per["delayed"] = round((zset_after - zset_before) / count, 1)
    result = {
        "notifications": count,
        "horizon_s": MEMORY_HORIZON_MS // 1000,
        "template_data_bytes": data_bytes(),
        "cancellation_key": "one of its own per notification (the index's worst case)",
        "keys_by_kind": {kind: size["keys"] for kind, size in sorted(by_kind.items())},
        "bytes_per_notification_by_kind": per,
        "used_memory_delta_per_notification": round((used_after - used_before) / count, 1),
        "pttl_ms": ttls,
    }
    return result, [f"memory: {p}" for p in load_problems(loaded)]


@dataclass(frozen=True)
class Held:
    """What a scheduled notification holds while it waits (bytes, by what lives how long)."""

    delayed: float  # its ``delayed`` member: until due
    record: float  # notification record (+ its cancellation index): until due + TTL + slack
    ttl_s: int  # the type's TTL, which counts from the due time


def held_bytes(held: Held, share: float, horizon_days: float) -> dict[str, float]:
    """Bytes held in steady state by the scheduled share of the seeds' daily volume, when each
    is due ``horizon_days`` after it was accepted; and the part beyond what the same
    notifications sent at once hold (their records for the idempotency TTL)."""
    per_s = DAILY_VOLUME * share / DAY_S
    horizon_s = horizon_days * DAY_S
    record_s = horizon_s + held.ttl_s + SHARED_DATA_SLACK_MS / 1000
    total = per_s * (held.delayed * horizon_s + held.record * record_s)
    at_once = per_s * held.record * min(record_s, IDEMPOTENCY_TTL_S)
    return {"total": total, "beyond_sent_at_once": total - at_once}


def budget(memory: dict[str, Any], ttl_s: int) -> dict[str, Any]:
    """The scenarios against the capacity plan's Redis."""
    per = memory["bytes_per_notification_by_kind"]
    held = Held(per.get("delayed", 0.0), per.get("ntf", 0.0) + per.get("cancel", 0.0), ttl_s)
    unkeyed = Held(held.delayed, per.get("ntf", 0.0), ttl_s)
    room = REDIS_BUDGET_GB - STEADY_STATE_GB - PEAK_GB
    rows = []
    for share, days in SCENARIOS:
        bytes_held = held_bytes(held, share, days)
        extra_gb = bytes_held["beyond_sent_at_once"] / 1e9
        without_key = held_bytes(unkeyed, share, days)["beyond_sent_at_once"] / 1e9
        rows.append(
            {
                "scheduled_share": share,
                "horizon_days": days,
                "waiting_at_once": round(DAILY_VOLUME * share * days),
                "held_gb": round(bytes_held["total"] / 1e9, 1),
                "beyond_sent_at_once_gb": round(extra_gb, 1),
                "beyond_sent_at_once_gb_without_cancellation_key": round(without_key, 1),
                "share_of_outage_headroom": round(extra_gb / room, 2),
                "fits": extra_gb <= room,
            }
        )
    return {
        "daily_volume": DAILY_VOLUME,
        "held_per_waiting_notification": {
            "delayed_member": held.delayed,
            "record_and_cancellation_index": round(held.record, 1),
            "type_ttl_s": ttl_s,
        },
        "redis_gb": REDIS_BUDGET_GB,
        "steady_state_gb": STEADY_STATE_GB,
        "peak_gb": PEAK_GB,
        "outage_headroom_gb": room,
        "scenarios": rows,
    }


# --- report --------------------------------------------------------------------------------


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The report as Markdown lines (printed, and written beside the JSON)."""
    p = result["parameters"]
    lines = [
        f"# Send later: `bench/schedule.py` ({result['started_utc']}, commit "
        f"{result['machine']['git_commit']})",
        "",
        f"Command: `{p['command']}`. {p['count']:,} notifications due at {p['rate']:,}/s "
        f"({p['shape']}), {p['workers']} worker(s)/scheduler loop(s), "
        f"{result['machine']['cpu_count']} cores, load average at start "
        f"{result['machine']['load_average_at_start'][0]}.",
        "",
    ]
    rows = []
    if "release" in result:
        rel = result["release"]["due_over_time"]
        lat = rel["release_lateness_ms"]
        rows.append(
            [
                "release alone: release lateness",
                f"{lat['p50']}",
                f"{lat['p99']}",
                f"{lat['max']}",
                f"{rel['released']:,}",
                f"{rel['released_per_s']:,}/s",
            ]
        )
    if "e2e" in result:
        e2e = result["e2e"]
        for label, name, n in (
            ("end to end: release lateness", "release_lateness_ms", e2e["releases_seen"]),
            ("end to end: delivery lateness", "delivery_lateness_ms", e2e["deliveries_sent"]),
        ):
            lat = e2e[name]
            rows.append(
                [
                    label,
                    f"{lat['p50']}",
                    f"{lat['p99']}",
                    f"{lat['max']}",
                    f"{n:,}",
                    f"{e2e['deliveries_per_s']:,}/s",
                ]
            )
    if rows:
        lines += [
            "| | p50 ms | p99 ms | max ms | n | rate |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    if "release" in result:
        backlog = result["release"]["backlog"]
        for label, run in (
            ("Release alone", result["release"]["due_over_time"]["schedulers"]),
            ("Backlog", backlog["schedulers"]),
        ):
            cpu = run["cpu_us_per_release"]
            lines.append(
                f"{label}: {run['calls']:,} scheduler calls ({run['calls_per_s']:,}/s), "
                f"{run['moved_per_call']} moved a call; CPU µs a release: scheduler loops "
                f"{cpu.get('bench', 0)}, Redis {cpu.get('redis', 0)} (the whole server)."
            )
        lines.append(
            f"Backlog of {backlog['members']:,} all due at once: moved in "
            f"{backlog['moved_in_ms']:,} ms ({backlog['moved_per_s']:,}/s)."
        )
    if "e2e" in result:
        cpu = result["e2e"]["cpu_us_per_delivery"]
        lines.append(
            "End to end CPU µs a delivery: "
            + ", ".join(f"{k} {v}" for k, v in cpu.items())
            + "; sends per second from the first due time: "
            + f"{result['e2e']['sends_per_second_of_run']}."
        )
    if "at_once" in result:
        now = result["at_once"]
        cpu = now["cpu_us_per_delivery"]
        lines.append(
            f"Compared: the same {now['deliveries_sent']:,} sent at once (queued before the "
            f"workers started) went at {now['deliveries_per_s']:,}/s; CPU µs a delivery: "
            + ", ".join(f"{k} {v}" for k, v in cpu.items())
            + "."
        )
    if "memory" in result:
        memory = result["memory"]
        lines += [
            "",
            f"Memory: {memory['notifications']:,} notifications due "
            f"{memory['horizon_s'] // 3600} h ahead, template data "
            f"{memory['template_data_bytes']} bytes, a cancellation key each.",
            "",
            "| key kind | keys | bytes per notification |",
            "| --- | --- | --- |",
        ]
        for kind, size in memory["bytes_per_notification_by_kind"].items():
            lines.append(f"| {kind} | {memory['keys_by_kind'].get(kind, 0):,} | {size:,} |")
        lines.append(f"| used_memory growth | | {memory['used_memory_delta_per_notification']:,} |")
        plan = result["budget"]
        lines += [
            "",
            f"At {DAILY_VOLUME:,} a day, against the plan's {REDIS_BUDGET_GB:.0f} GB "
            f"({STEADY_STATE_GB:.0f} steady, {PEAK_GB:.0f} peak, "
            f"{plan['outage_headroom_gb']:.0f} GB outage headroom):",
            "",
            "| scheduled | horizon | waiting | held GB | beyond sent at once GB (without a "
            "cancellation key) | of headroom | fits |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in plan["scenarios"]:
            lines.append(
                f"| {row['scheduled_share']:.0%} | {row['horizon_days']:g} d | "
                f"{row['waiting_at_once']:,} | {row['held_gb']:,} | "
                f"{row['beyond_sent_at_once_gb']:,} "
                f"({row['beyond_sent_at_once_gb_without_cancellation_key']:,}) | "
                f"{row['share_of_outage_headroom']:.0%} | "
                f"{'yes' if row['fits'] else 'NO'} |"
            )
    if result["problems"]:
        lines += ["", "Problems:", *(f"- {p}" for p in result["problems"])]
    return lines


def at_once(
    args: argparse.Namespace, prefix: str, catalog_path: Path, catalog: Catalog, logs: Path
) -> tuple[dict[str, Any], list[str]]:
    """The comparison: the same notifications sent at once, drained by the same workers."""
    loaded = asyncio.run(preload(args, KeySpace(prefix), catalog))
    return run_e2e(
        args, prefix, catalog_path, logs,
        lambda keys, snapshot: measure_at_once(args, keys, loaded, snapshot),
    )  # fmt: skip


# --- main ----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--count",
        type=int,
        default=DEFAULT_COUNT,
        help=f"scheduled notifications per run (default {DEFAULT_COUNT:,})",
    )
    parser.add_argument(
        "--rate", type=int, default=DEFAULT_RATE, help=f"due a second (default {DEFAULT_RATE:,})"
    )
    parser.add_argument(
        "--shape",
        choices=("spread", "second"),
        default="spread",
        help="due times spread over each second, or at its first ms",
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=DEFAULT_LEAD_S,
        help="seconds between the estimated end of loading and the first due "
        f"time (default {DEFAULT_LEAD_S})",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help="delivery worker processes, and scheduler loops in the release "
        f"phase (default {DEFAULT_WORKERS})",
    )
    parser.add_argument(
        "--memory-count",
        type=int,
        default=DEFAULT_MEMORY_COUNT,
        help=f"notifications in the memory phase (default {DEFAULT_MEMORY_COUNT:,})",
    )
    parser.add_argument("--quick", action="store_true", help="--count 20000 --memory-count 20000")
    for phase in ("release", "delivery", "at-once", "memory"):
        parser.add_argument(f"--skip-{phase}", action="store_true", help=f"skip the {phase} phase")
    add_redis_url(parser, "the benchmark and the workers")
    args = parser.parse_args(argv)
    if args.quick:
        args.count, args.memory_count = 20_000, 20_000
    if min(args.count, args.rate, args.workers, args.memory_count) < 1:
        parser.error("--count, --rate, --workers and --memory-count must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("console", "WARNING")
    started = datetime.now(UTC)
    base = f"bench-{secrets.token_hex(6)}"
    client = connect_sync(args.redis_url)
    result: dict[str, Any] = {
        **result_head(KIND, started, client),
        "parameters": {
            "command": " ".join(["bench/schedule.py", *(sys.argv[1:] if argv is None else argv)]),
            "count": args.count,
            "rate": args.rate,
            "shape": args.shape,
            "lead_s": args.lead,
            "workers": args.workers,
            "memory_count": args.memory_count,
            "mix": f"{TYPE}, EMAIL only: 1 {PRIORITY.value} delivery, send_at",
            "catalog": "clarion.toml without provider rate limits",
            "key_prefix": base,
        },
        "targets": {"release_p99_ms": TARGET_RELEASE_P99_MS},
        "problems": [],
    }
    try:
        with tempfile.TemporaryDirectory(prefix="clarion-schedule-") as temp:
            catalog_path = Path(temp) / "clarion.toml"
            unlimited_catalog(REPO / "clarion.toml", catalog_path)
            catalog = load_catalog(catalog_path)
            rate = asyncio.run(calibrate(args.redis_url, f"{base}-cal", catalog))
            result["parameters"]["calibrated_ingest_per_s"] = round(rate)
            phases: list[tuple[str, Callable[[], tuple[dict[str, Any], list[str]]]]] = []
            if not args.skip_release:
                phases.append(
                    (
                        "release",
                        lambda: asyncio.run(measure_release(args, f"{base}-rel", catalog, rate)),
                    )
                )
            if not args.skip_delivery:
                phases.append(("e2e", lambda: run_e2e(
                    args, f"{base}-e2e", catalog_path, Path(temp),
                    lambda keys, snapshot: measure_e2e(args, keys, catalog, rate, snapshot),
                )))  # fmt: skip
            if not args.skip_at_once:
                phases.append(("at_once", lambda: at_once(args, f"{base}-now", catalog_path,
                                                          catalog, Path(temp))))  # fmt: skip
            if not args.skip_memory:
                phases.append(
                    ("memory", lambda: asyncio.run(measure_memory(args, f"{base}-mem", catalog)))
                )
            for name, phase in phases:
                print(f"{name} ...", flush=True)
                result[name], problems = phase()
                result["problems"] += problems
                delete_prefix(client, f"{base}-")  # each phase starts from empty keys
    except BenchError as error:
        result["problems"].append(str(error))
    finally:
        delete_prefix(client, base)
        client.close()
    if "memory" in result:
        result["budget"] = budget(result["memory"], catalog.types[TYPE].ttl_seconds)
    result["pass"] = pass_of(result)
    lines = summary_lines(result)
    print("\n" + "\n".join(lines))
    write_result(KIND, result, started)
    result_stem(KIND, started).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"and {shown(result_stem(KIND, started).with_suffix('.md'))}")
    print_problems(result["problems"])
    return 1 if result["problems"] else 0


def pass_of(result: dict[str, Any]) -> dict[str, bool]:
    passed = {"no_problems": not result["problems"]}
    if "release" in result:
        p99 = result["release"]["due_over_time"]["release_lateness_ms"]["p99"]
        passed["release_alone_p99"] = p99 < TARGET_RELEASE_P99_MS
    if "e2e" in result:
        passed["e2e_release_p99"] = (
            result["e2e"]["release_lateness_ms"]["p99"] < TARGET_RELEASE_P99_MS
        )
        passed["e2e_delivery_p99"] = (
            result["e2e"]["delivery_lateness_ms"]["p99"] < TARGET_RELEASE_P99_MS
        )
    return passed


if __name__ == "__main__":
    sys.exit(main())
