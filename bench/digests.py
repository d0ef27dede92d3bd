"""Digests: notifications joined per second at ingest, and how late due digests are closed.

Run from anywhere with the project's virtualenv (it needs Redis; PostgreSQL only for the
API's start)::

    .venv/bin/python bench/digests.py            # 2 x 8 s of each type; 5,000 digests closed
    .venv/bin/python bench/digests.py --quick    # a smoke run (about 40 s)
    .venv/bin/python bench/digests.py --due-rate 2000   # the digests come due at 2,000 a second

The catalog is ``clarion.toml`` without provider rate limits, with two types added that
differ only in ``digest``: ``comment`` (``digest = { window = "…", key = "{{ data.thread_id
}}", max_items = 100 }``) and ``comment_plain`` (none); both NORMAL, EMAIL only, each
notification to one recipient with an email address. Two parts, each under its own key
prefix:

1. **Joining.** The API alone (``clarion api --workers 2``, no delivery worker competing for
   the two cores), driven as ``bench/ingest.py`` drives it: ``POST /v1/notifications/batch``,
   1000 items per request, 8 in flight, a new connection per request, for ``--duration``
   seconds per run; runs of ``comment_plain`` and ``comment`` alternate, ``--rounds`` of
   each. A ``comment`` notification is written DIGESTED and then joins its digest
   (``app.ingest.digests.DigestJoiner``) before the batch is answered, so notifications/s of
   ``comment`` is notifications joined per second. Each batch names 1000 distinct (recipient,
   thread) pairs of ``--recipients`` x ``--threads``; the batches cycle through them, so
   most notifications join a digest opened by an earlier one. The CPU each process group
   used, per notification, read from ``/proc``.
2. **Closing.** The API and ``--workers`` worker processes (``clarion worker --slot N``:
   each runs ``app.digests.closer.DigestCloser`` beside its delivery worker). ``--digests``
   (recipient, thread) pairs are opened by a first notification each, through the batch API
   (at ``--due-rate`` a second, in batches sent every 50 ms; 0: as fast as the API takes
   them), then ``--items - 1`` more notifications join each. Every digest closes
   ``--window`` seconds after it opened (``closes_ms`` in its 202). Lateness of a digest:
   the ms in the id of the notification it was closed into (a UUIDv7, made when the closer
   ingested it) minus its ``closes_ms``; also its first ``DigestClosed`` event's time minus
   ``closes_ms``, and its delivery's sandbox record minus ``closes_ms``. From the shard's
   ``events`` stream: ``DigestClosed`` events per digest (more than one: closed more than
   once) and ``NotificationAccepted`` events under ``digest:<id>`` (more than one: its
   notification made more than once); from the sandbox: deliveries sent more than once.

``--private-redis`` runs on a Redis of its own (``tests.servers.redis_server``), so that no
other client of a shared one counts in Redis's CPU. All Redis keys live under a random
``bench-<hex>`` prefix and are deleted at the end, with the services' database. The result
is printed and written to ``bench/results/digests-<UTC timestamp>.json``, which replaces the
older digests results there. The exit status is 1 when an item was refused, a request
failed, a digest was not closed, a digest's notification was made or sent more than once,
or a service logged an error; a missed target (or a digest closed twice into one
notification) alone is not.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import secrets
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec
import redis.asyncio as aredis

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.catalog import parse_catalog
from bench.harness import (
    BATCH_PATH,
    BATCH_SIZE,
    HEALTH_PATH,
    REPO,
    SCAN_CHUNK,
    CpuSnapshot,
    add_redis_url,
    api_client,
    clarion_executable,
    cpu_snapshot,
    delete_prefix,
    format_table,
    free_port,
    id_ms,
    latency_summary,
    log_findings,
    print_problems,
    read_sandbox,
    redis_pid,
    result_head,
    running,
    service_env,
    stream_events,
    unlimited_catalog,
    verdict,
    wait_consumers,
    wait_healthy,
    write_result,
)
from streams.core import codec
from streams.core.connection import connect, connect_sync
from streams.core.events import DigestClosed, NotificationAccepted
from streams.core.keys import KeySpace
from streams.digests.ids import DIGEST_KEY_PREFIX

KIND: Final = "digests"
DIGEST_TYPE, PLAIN_TYPE = "comment", "comment_plain"
CONCURRENCY: Final = 8  # batch requests in flight, as bench/ingest.py
PACE_S: Final = 0.05  # a paced opening sends a batch this often
API_WORKERS: Final = 2
JOIN_WINDOW: Final = "10m"  # part 1: no digest closes while joins are measured
TARGET_JOINED_PER_S: Final = 20_000.0
TARGET_LATENESS_P99_MS: Final = 1000.0
SETTLE_S: Final = 2.0  # after the last close: time for a second close of the same digest
STALL_TIMEOUT_S: Final = 30.0
POLL_S: Final = 0.1
LEAD_S: Final = 0.05  # how long before the first digest comes due closing's CPU counts from

# The two types, NAME, DIGEST and EMAIL filled in.
TYPES: Final = """
[types.NAME]
channels = ["EMAIL"]
priority = "NORMAL"
ttl_seconds = 86400
opt_out = false
DIGEST
[types.NAME.templates.en]
EMAIL = EMAIL_TEMPLATE
"""
# A digest's templates get count, items and key; a plain comment its own data.
DIGEST_EMAIL: Final = (
    '{ title = "{{ count }} comments", body = "{% for c in items %}{{ c.text }}{% endfor %}" }'
)
PLAIN_EMAIL: Final = '{ title = "A comment", body = "{{ author }}: {{ text }}" }'

DIGEST: Final = 'digest = { window = "WINDOW", key = "{{ data.thread_id }}", max_items = 100 }'


def write_catalog(target: Path, window: str) -> list[str]:
    """``clarion.toml`` without rate limits, with ``comment`` (a digest of ``window``) and
    ``comment_plain``; the providers whose rate limit went."""
    unlimited = unlimited_catalog(REPO / "clarion.toml", target)
    with target.open("a") as catalog:
        digest = DIGEST.replace("WINDOW", window)
        for name, digest_line, email in (
            (DIGEST_TYPE, digest, DIGEST_EMAIL),
            (PLAIN_TYPE, "", PLAIN_EMAIL),
        ):
            text = TYPES.replace("NAME", name).replace("DIGEST", digest_line)
            catalog.write(text.replace("EMAIL_TEMPLATE", email))
    parse_catalog(target.read_text(), str(target))  # a mistake here, not in the API's log
    return unlimited


# --- request bodies and answers ---------------------------------------------------------------


def item(type_name: str, i: int, pair: int, recipients: int) -> bytes:
    """Item ``i`` of a batch (after its idempotency key's tag): a comment on thread
    ``pair // recipients`` to recipient ``pair % recipients``."""
    recipient, thread = pair % recipients, pair // recipients
    return (
        b'-%d", "recipient": {"id": "r-%d", "email": "r%d@example.com"}, "type": "%s", '
        b'"data": {"thread_id": "t-%d", "author": "a-%d", "text": "A comment on thread %d."}}'
        % (i, recipient, recipient, type_name.encode(), thread, i, thread)
    )


def pieces(type_name: str, pairs: range, recipients: int) -> list[bytes]:
    """A batch body of one item per pair, in pieces to be joined with the batch's tag (as
    ``harness.batch_pieces``: a fresh body costs one ``bytes.join``)."""
    parts = [b'{"notifications": [{"idempotency_key": "']
    for i, pair in enumerate(pairs):
        more = b', {"idempotency_key": "' if i < len(pairs) - 1 else b"]}"
        parts.append(item(type_name, i, pair, recipients) + more)
    return parts


def pair_sets(type_name: str, pairs: int, recipients: int, size: int) -> list[list[bytes]]:
    """The pairs ``0 .. pairs - 1`` as batches of ``size`` (a last smaller one)."""
    return [
        pieces(type_name, range(start, min(start + size, pairs)), recipients)
        for start in range(0, pairs, size)
    ]


class Joined(msgspec.Struct):
    id: str
    count: int
    closes_ms: int


class ItemResult(msgspec.Struct):
    status_code: int
    idempotency_key: str = ""
    id: str | None = None
    digest: Joined | None = None
    detail: str | None = None


class BatchReply(msgspec.Struct):
    results: list[ItemResult]


_reply = msgspec.json.Decoder(BatchReply)


@dataclass
class Posted:
    """What the API answered in one run of batches."""

    accepted: int = 0
    with_digest: int = 0  # accepted items whose answer names a digest
    refused: int = 0
    failed_requests: int = 0
    first_problem: str = ""
    closes_ms: dict[str, int] = field(default_factory=dict)  # digest id -> closes_ms
    latencies: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    first_sent: float = 0.0  # perf_counter of the first request, last answer
    last_answer: float = 0.0

    def record(self, response: httpx.Response, keep_digests: bool) -> None:
        if response.status_code != 200:
            self.failed_requests += 1
            self.first_problem = self.first_problem or f"HTTP {response.status_code}"
            return
        for result in _reply.decode(response.content).results:
            if result.status_code != 202:
                self.refused += 1
                self.first_problem = self.first_problem or (
                    f"item {result.idempotency_key}: {result.status_code} {result.detail}"
                )
                continue
            self.accepted += 1
            if result.digest is not None:
                self.with_digest += 1
                if keep_digests:
                    self.closes_ms[result.digest.id] = result.digest.closes_ms


async def post_all(
    http: httpx.AsyncClient,
    bodies: Iterator[tuple[float, bytes]],
    deadline: float = math.inf,
    *,
    keep_digests: bool = False,
    loops: int = CONCURRENCY,
) -> Posted:
    """Post each ``(offset s, body)`` no sooner than ``offset`` after the start, from
    ``loops`` loops, until the bodies or the time (``deadline``, perf_counter) run out."""
    result = Posted()
    started = result.first_sent = time.perf_counter()

    async def loop() -> None:
        for offset, body in bodies:
            if time.perf_counter() >= deadline:
                return
            if (wait := started + offset - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            sent = time.perf_counter()
            try:
                response = await http.post(BATCH_PATH, content=body)
            except httpx.HTTPError as error:
                result.failed_requests += 1
                result.first_problem = result.first_problem or f"no answer: {error!r}"
                return
            result.last_answer = time.perf_counter()
            result.latencies.append(result.last_answer - sent)
            result.record(response, keep_digests)

    await asyncio.gather(*(loop() for _ in range(loops)))
    result.elapsed_s = time.perf_counter() - started
    return result


def cycling(sets: list[list[bytes]], tag: str) -> Iterator[tuple[float, bytes]]:
    """Batches through ``sets`` again and again, each with keys of its own, at once."""
    for number in itertools.count():
        yield 0.0, f"{tag}-b{number}".encode().join(sets[number % len(sets)])


# --- the services -------------------------------------------------------------------------


@dataclass
class Services:
    url: str
    keys: KeySpace
    pids: dict[str, list[int]]
    redis_server: int | None
    logs: list[Path]

    def cpu(self) -> CpuSnapshot:
        return cpu_snapshot(self.pids, self.redis_server, postgres=False)


@contextmanager
def services(
    prefix: str, redis_url: str, catalog: Path, workers: int, logs: Path
) -> Iterator[Services]:
    """The API (and ``workers`` worker processes) under ``prefix`` until the block ends; their
    logs in ``logs``."""
    port = free_port()
    env = service_env(prefix, redis_url, port, catalog)
    clarion = str(clarion_executable())
    api_log = logs / "api.log"
    worker_logs = [logs / f"worker-{slot}.log" for slot in range(workers)]
    with ExitStack() as stack:
        api = stack.enter_context(
            running([clarion, "api", "--workers", str(API_WORKERS)], env, api_log)
        )
        procs = [
            stack.enter_context(running([clarion, "worker", "--slot", str(n)], env, path))
            for n, path in enumerate(worker_logs)
        ]
        url = f"http://127.0.0.1:{port}"
        wait_healthy(api, url + HEALTH_PATH, api_log)
        keys = KeySpace(prefix)
        if procs:
            client = connect_sync(redis_url)
            try:
                wait_consumers(client, keys, procs, worker_logs)
            finally:
                client.close()
        pids = {"api": [api.pid]} | ({"workers": [p.pid for p in procs]} if procs else {})
        yield Services(url, keys, pids, redis_pid(redis_url), [api_log, *worker_logs])


def findings(logs: list[Path]) -> tuple[dict[str, Any], list[str]]:
    """What the services logged, and a problem for each that logged an error."""
    found = {path.stem: log_findings(path) for path in logs}
    problems = [f"{name}: {f['errors']} error lines" for name, f in found.items() if f["errors"]]
    return found, problems


# --- part 1: joining ------------------------------------------------------------------------


def run_summary(type_name: str, posted: Posted, cpu_s: dict[str, float]) -> dict[str, Any]:
    """One run's figures: notifications/s, batch latency, CPU per notification."""
    per_us = {g: round(s / posted.accepted * 1e6, 1) for g, s in cpu_s.items() if posted.accepted}
    return {
        "type": type_name,
        "notifications_accepted": posted.accepted,
        "answers_naming_a_digest": posted.with_digest,
        "items_refused": posted.refused,
        "failed_requests": posted.failed_requests,
        "elapsed_s": round(posted.elapsed_s, 3),
        "notifications_per_s": round(posted.accepted / posted.elapsed_s, 1),
        "batch_latency_ms": latency_summary([s * 1000 for s in posted.latencies]),
        "cpu_s": cpu_s,
        "cpu_us_per_notification": per_us,
        "cpu_us_per_notification_services": round(
            sum(us for g, us in per_us.items() if g != "bench"), 1
        ),
    }


async def measure_joining(
    svc: Services, args: argparse.Namespace, redis_url: str
) -> tuple[dict[str, Any], list[str]]:
    """Alternate runs of the plain and the digest type against the API alone."""
    pairs = args.recipients * args.threads
    sets = {t: pair_sets(t, pairs, args.recipients, BATCH_SIZE) for t in (PLAIN_TYPE, DIGEST_TYPE)}
    runs: list[dict[str, Any]] = []
    problems: list[str] = []
    digest_accepted = 0
    async with api_client(svc.url, CONCURRENCY, keepalive=False) as http:
        for type_name, parts in sets.items():  # warm-up, not counted: pools, script loads
            warming = itertools.islice(cycling(parts, f"warm-{type_name}"), API_WORKERS)
            warm = await post_all(http, warming, loops=API_WORKERS)
            digest_accepted += warm.accepted if type_name == DIGEST_TYPE else 0
        for number, type_name in enumerate([PLAIN_TYPE, DIGEST_TYPE] * args.rounds):
            before = svc.cpu()
            tag = f"r{number}-{type_name}"
            posted = await post_all(http, cycling(sets[type_name], tag), _in(args.duration))
            run = run_summary(type_name, posted, svc.cpu().used(before))
            print(f"  {type_name}: {run['notifications_per_s']:,.0f} notifications/s", flush=True)
            if posted.first_problem:
                print(f"  {type_name}: {posted.first_problem}", flush=True)
            runs.append(run)
            wanted = posted.accepted if type_name == DIGEST_TYPE else 0
            digest_accepted += wanted
            if posted.refused or posted.failed_requests:
                problems.append(f"joining, {type_name}: {posted.first_problem}")
            if posted.with_digest != wanted:
                problems.append(f"joining, {type_name}: {posted.with_digest} answers name a digest")
    digested = await count_events(redis_url, svc.keys, "NotificationDigested")
    if digested != digest_accepted:
        problems.append(f"joining: {digested} NotificationDigested events for {digest_accepted}")
    return {"runs": runs, "by_type": by_type(runs), "digested_events": digested}, problems


def _in(seconds: float) -> float:
    return time.perf_counter() + seconds


def by_type(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each type's runs together: notifications/s (all runs' notifications over their time),
    its lowest and highest run, and CPU per notification."""
    figures: dict[str, Any] = {}
    for type_name in (PLAIN_TYPE, DIGEST_TYPE):
        mine = [run for run in runs if run["type"] == type_name]
        accepted = sum(run["notifications_accepted"] for run in mine)
        cpu: Counter[str] = Counter()
        for run in mine:
            cpu.update(run["cpu_s"])
        figures[type_name] = {
            "notifications_per_s": round(accepted / sum(run["elapsed_s"] for run in mine), 1),
            "runs_per_s": [run["notifications_per_s"] for run in mine],
            "cpu_us_per_notification": {
                g: round(s / accepted * 1e6, 1) for g, s in cpu.items() if accepted
            },
        }
    plain, digest = figures[PLAIN_TYPE], figures[DIGEST_TYPE]
    ratio = digest["notifications_per_s"] / (plain["notifications_per_s"] or math.nan)
    figures["digest_vs_plain"] = round(ratio, 3)
    return figures


async def count_events(redis_url: str, keys: KeySpace, kind: str) -> int:
    """Events of ``kind`` on every shard's ``events`` stream."""
    client = connect(redis_url)
    try:
        found = [await stream_events(client, shard.events) for shard in keys.all_shards()]
    finally:
        await client.aclose()
    return sum(events.by_type[kind] for events in found)


async def stream_batches(client: aredis.Redis, stream: str) -> Any:
    """The events of each entry of ``stream``, with the entry's ms, oldest first."""
    start = "-"
    name = codec.EVENT_FIELD.encode()
    while True:
        chunk: Any = await client.xrange(stream, start, "+", count=SCAN_CHUNK)
        for _, fields in chunk:
            yield codec.decode_events(fields[name])
        if len(chunk) < SCAN_CHUNK:
            return
        start = f"({chunk[-1][0].decode()}"


# --- part 2: closing ------------------------------------------------------------------------


def closing_bodies(args: argparse.Namespace, tag: str) -> list[tuple[float, bytes]]:
    """The first notification of each digest (paced at ``--due-rate``, else at once), then
    ``--items - 1`` rounds of one more for each."""
    size = max(1, round(args.due_rate * PACE_S)) if args.due_rate else BATCH_SIZE
    opening = pair_sets(DIGEST_TYPE, args.digests, args.recipients, min(size, BATCH_SIZE))
    bodies = []
    for number, parts in enumerate(opening):
        offset = number * size / args.due_rate if args.due_rate else 0.0
        bodies.append((offset, f"{tag}-open{number}".encode().join(parts)))
    last = bodies[-1][0]
    joining = pair_sets(DIGEST_TYPE, args.digests, args.recipients, BATCH_SIZE)
    for round_number in range(1, args.items):
        for number, parts in enumerate(joining):
            bodies.append((last, f"{tag}-join{round_number}-{number}".encode().join(parts)))
    return bodies


async def wait_closed(client: aredis.Redis, keys: KeySpace, last_closes_ms: int) -> bool:
    """Wait until no digest is due on any shard after ``last_closes_ms``, then ``SETTLE_S``
    more; False when the due sets stopped shrinking for ``STALL_TIMEOUT_S``."""
    previous, progress = -1, time.monotonic()
    while True:
        due = sum([await client.zcard(shard.digests_due) for shard in keys.all_shards()])
        if due == 0 and time.time() * 1000 > last_closes_ms:
            await asyncio.sleep(SETTLE_S)
            return True
        if due != previous:
            previous, progress = due, time.monotonic()
        elif time.monotonic() - progress > STALL_TIMEOUT_S and time.time() * 1000 > last_closes_ms:
            return False
        await asyncio.sleep(POLL_S)


async def wait_sent(client: aredis.Redis, keys: KeySpace, wanted: int) -> int:
    """Wait until the sandbox has ``wanted`` records (or they stop coming); how many."""
    previous, progress = -1, time.monotonic()
    while (sent := await client.xlen(keys.sandbox_sent)) < wanted:
        if sent != previous:
            previous, progress = sent, time.monotonic()
        elif time.monotonic() - progress > STALL_TIMEOUT_S:
            break
        await asyncio.sleep(POLL_S)
    return sent


@dataclass
class Outcome:
    """What the events say of each digest: its closes and the notifications made of it."""

    closed: dict[str, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))
    made: dict[str, list[tuple[str, list[str]]]] = field(default_factory=lambda: defaultdict(list))


async def read_outcome(client: aredis.Redis, keys: KeySpace) -> Outcome:
    """Every ``DigestClosed`` (its ms, its notification) and every ``NotificationAccepted``
    under ``digest:<id>`` (its id, its deliveries), by digest."""
    found = Outcome()
    for shard in keys.all_shards():
        async for events in stream_batches(client, shard.events):
            for event in events:
                if isinstance(event, DigestClosed):
                    at_ms = int(event.at.timestamp() * 1000)
                    found.closed[event.digest_id].append((at_ms, event.notification_id))
                elif isinstance(event, NotificationAccepted) and event.idempotency_key.startswith(
                    DIGEST_KEY_PREFIX
                ):
                    digest = event.idempotency_key.removeprefix(DIGEST_KEY_PREFIX)
                    found.made[digest].append((event.notification_id, event.delivery_ids))
    return found


def due_figures(closes: dict[str, int]) -> dict[str, Any]:
    """When the digests came due: over what span, at what rate, the busiest second."""
    times = sorted(closes.values())
    span_s = (times[-1] - times[0]) / 1000 if times else 0.0
    busiest = max(Counter(ms // 1000 for ms in times).values(), default=0)
    return {
        "digests": len(times),
        "span_s": round(span_s, 3),
        "due_per_s": round(len(times) / span_s, 1) if span_s > 0 else None,
        "busiest_second": busiest,
    }


def lateness(
    closes: dict[str, int], outcome: Outcome, first_sent_ms: dict[str, int]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Lateness (ms) of each digest by when its notification was made, when it was first
    recorded closed and when its delivery was first sent; and what happened more than once."""
    made, closed, sent = [], [], []
    for digest, closes_ms in closes.items():
        if notifications := outcome.made.get(digest):
            made.append(min(id_ms(nid) for nid, _ in notifications) - closes_ms)
            sends = [first_sent_ms[d] for _, ds in notifications for d in ds if d in first_sent_ms]
            if sends:
                sent.append(min(sends) - closes_ms)
        if events := outcome.closed.get(digest):
            closed.append(min(at for at, _ in events) - closes_ms)
    figures = {
        "notification_made": latency_summary([float(ms) for ms in made]),
        "digest_closed_event": latency_summary([float(ms) for ms in closed]),
        "delivery_sent": latency_summary([float(ms) for ms in sent]),
    }
    made_twice = {
        d
        for d in closes
        if len(outcome.made.get(d, [])) > 1
        or len({nid for _, nid in outcome.closed.get(d, [])}) > 1
    }
    counts = {
        "digests_not_closed": sum(1 for d in closes if d not in outcome.closed),
        "digests_without_notification": sum(1 for d in closes if d not in outcome.made),
        "digests_closed_more_than_once": sum(1 for d in closes if len(outcome.closed[d]) > 1),
        "digest_closed_events": sum(len(outcome.closed[d]) for d in closes),
        "closes_by_count": dict(Counter(len(outcome.closed[d]) for d in closes)),
        "notifications_made_more_than_once": len(made_twice),
        "digests_unknown_to_the_answers": sum(1 for d in outcome.closed if d not in closes),
    }
    return figures, counts


async def measure_closing(
    svc: Services, args: argparse.Namespace, redis_url: str
) -> tuple[dict[str, Any], list[str]]:
    """Open ``--digests`` digests, join more to them, and let the workers close them."""
    client = connect(redis_url)
    problems: list[str] = []
    try:
        async with api_client(svc.url, CONCURRENCY, keepalive=False) as http:
            bodies = closing_bodies(args, "close")
            posted = await post_all(http, iter(bodies), keep_digests=True)
        closes = posted.closes_ms
        print(f"  {posted.accepted:,} notifications joined {len(closes):,} digests", flush=True)
        if posted.refused or posted.failed_requests:
            problems.append(f"closing: {posted.first_problem}")
        first_due = min(closes.values(), default=0)
        ingest_end_ms = time.time() * 1000
        if len(closes) != args.digests:
            problems.append(f"closing: {len(closes)} digests opened for {args.digests} pairs")
        if ingest_end_ms > first_due:
            problems.append("closing: digests came due before the last join: widen --window")
        # The services' CPU from just before the first digest comes due: the window before it
        # is idle polling, which would count as closing.
        await asyncio.sleep(max(0.0, (first_due - time.time() * 1000) / 1000 - LEAD_S))
        before = svc.cpu()
        closed_all = await wait_closed(client, svc.keys, max(closes.values(), default=0))
        cpu_s = svc.cpu().used(before)
        outcome = await read_outcome(client, svc.keys)
        made = sum(len(ds) for nids in outcome.made.values() for _, ds in nids)
        sends = await wait_sent(client, svc.keys, made)
        record = await read_sandbox(client, svc.keys.sandbox_sent, "0-0")
    finally:
        await client.aclose()
    late, counts = lateness(closes, outcome, record.first_sent_ms)
    if not closed_all or counts["digests_not_closed"]:
        problems.append(f"closing: {counts['digests_not_closed']} digests not closed")
    if counts["notifications_made_more_than_once"]:
        problems.append(f"closing: {counts['notifications_made_more_than_once']} made twice")
    if record.repeated_sends or record.flagged_duplicates:
        problems.append(f"closing: {record.repeated_sends} deliveries sent more than once")
    if sends < made:
        problems.append(f"closing: {made - sends} of {made} digest deliveries never sent")
    at = sorted(at for events in outcome.closed.values() for at, _ in events)
    close_span_s = (at[-1] - at[0]) / 1000 if at else 0.0
    closed = len(outcome.closed)
    return {
        "notifications_accepted": posted.accepted,
        "ingest_elapsed_s": round(posted.elapsed_s, 3),
        "expected_digests": args.digests,
        "due": due_figures(closes),
        "lateness_ms": late,
        **counts,
        "digest_deliveries": made,
        "deliveries_sent": len(record.first_sent_ms),
        "deliveries_sent_more_than_once": record.repeated_sends + record.flagged_duplicates,
        "closed_per_s": round(closed / close_span_s, 1) if close_span_s > 0 else None,
        "cpu_s": cpu_s,
        "cpu_us_per_digest": {g: round(s / closed * 1e6, 1) for g, s in cpu_s.items() if closed},
    }, problems


# --- report ---------------------------------------------------------------------------------


def print_report(result: dict[str, Any]) -> None:
    params, joining, closing = result["parameters"], result["joining"], result["closing"]
    print(
        f"\nClarion digests benchmark: {params['cpu_count']} cores, load average at start "
        f"{result['machine']['load_average_at_start'][0]}\n"
    )
    rows = [
        [
            f"run {n + 1}: {run['type']}",
            f"{run['notifications_per_s']:,.0f}",
            "{p50:.0f}/{p99:.0f}".format(**run["batch_latency_ms"]),
            *(f"{run['cpu_us_per_notification'].get(g, 0):.1f}" for g in ("api", "redis", "bench")),
        ]
        for n, run in enumerate(joining["runs"])
    ]
    header = ["batch x1000, 8 in flight, API alone", "notif/s", "batch p50/p99 ms"]
    print(format_table([*header, "API µs", "Redis µs", "client µs"], rows))
    digest, plain = joining["by_type"][DIGEST_TYPE], joining["by_type"][PLAIN_TYPE]
    print(
        f"joined/s {digest['notifications_per_s']:,.0f} against plain "
        f"{plain['notifications_per_s']:,.0f} ({joining['by_type']['digest_vs_plain']:.2f} of it)\n"
    )
    late, due = closing["lateness_ms"], closing["due"]
    print(
        f"Closing: {due['digests']:,} digests due over {due['span_s']:.2f} s "
        f"({due['due_per_s'] or 0:,.0f}/s, busiest second {due['busiest_second']:,}), "
        f"{params['workers']} worker processes; closed at {closing['closed_per_s'] or 0:,.0f}/s"
    )
    rows = [
        [label, str(late[key]["count"]), *(f"{late[key][p]:,.0f}" for p in ("p50", "p99", "max"))]
        for label, key in (
            ("notification made (its id) - closes_ms", "notification_made"),
            ("first DigestClosed event - closes_ms", "digest_closed_event"),
            ("first delivery sent - closes_ms", "delivery_sent"),
        )
    ]
    print(format_table(["lateness, ms", "n", "p50", "p99", "max"], rows))
    print(
        f"closed more than once: {closing['digests_closed_more_than_once']:,} digests "
        f"({closing['digest_closed_events']:,} DigestClosed events); notifications made more "
        f"than once: {closing['notifications_made_more_than_once']}; deliveries sent more than "
        f"once: {closing['deliveries_sent_more_than_once']}; not closed: "
        f"{closing['digests_not_closed']}\n"
    )
    targets = [
        ["joined/s", f"{digest['notifications_per_s']:,.0f}", f">= {TARGET_JOINED_PER_S:,.0f}"],
        ["close lateness p99 (made)", f"{late['notification_made']['p99']:,.0f} ms",
         f"<= {TARGET_LATENESS_P99_MS:,.0f} ms"],
    ]  # fmt: skip
    for row, ok in zip(targets, result["pass"].values(), strict=True):
        row.append(verdict(ok))
    print(format_table(["target", "measured", "wanted", "verdict"], targets) + "\n")
    print_problems(result["problems"])


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    add = parser.add_argument
    add("--duration", type=float, default=8.0, help="seconds per joining run (default 8)")
    add("--rounds", type=int, default=2, help="joining runs of each type, alternated (default 2)")
    add("--recipients", type=int, default=2000, help="recipients (default 2,000)")
    add("--threads", type=int, default=10, help="threads per recipient, joining (default 10)")
    add("--digests", type=int, default=5000, help="digests closed (default 5,000)")
    add("--items", type=int, default=2, help="notifications per closed digest (default 2)")
    add("--window", type=int, default=30, help="closed digests' window, s (default 30)")
    add("--due-rate", type=float, default=0.0, help="digests opened (so due) per s; 0: at once")
    add("--workers", type=int, default=2, help="worker processes closing (default 2)")
    add("--quick", action="store_true", help="a smoke run: small sizes, one short round")
    add("--private-redis", action="store_true", help="a Redis of its own, started and stopped here")
    add_redis_url(parser, "the services")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.rounds, args.threads = 2.0, 1, 2
        args.digests, args.items, args.window = 1000, 2, 10
    for name in ("duration", "rounds", "recipients", "threads", "digests", "items", "window"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers < 1 or args.due_rate < 0:
        parser.error("--workers must be at least 1, --due-rate at least 0")
    if args.recipients * args.threads < BATCH_SIZE:
        parser.error(f"--recipients x --threads must be at least {BATCH_SIZE}")
    return args


def run_parts(args: argparse.Namespace, prefix: str, temp: Path) -> dict[str, Any]:
    """Joining, then closing, each with its own services, catalog and key prefix."""
    parts: dict[str, Any] = {"problems": [], "logs": {}}
    for part, window, workers in (("joining", JOIN_WINDOW, 0), ("closing", f"{args.window}s", 2)):
        print(f"{part} ...", flush=True)
        directory = temp / part
        directory.mkdir()
        catalog = directory / "clarion.toml"
        parts["rate_limits_removed_from"] = write_catalog(catalog, window)
        measure = measure_joining if part == "joining" else measure_closing
        with services(f"{prefix}-{part}", args.redis_url, catalog, workers and args.workers,
                      directory) as svc:  # fmt: skip
            figures, problems = asyncio.run(measure(svc, args, args.redis_url))
        found, logged = findings(svc.logs)  # once the services have stopped
        parts[part] = figures
        parts["logs"][part] = found
        parts["problems"] += problems + [f"{part}: {p}" for p in logged]
    return parts


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.private_redis:
        return run_benchmark(args)
    from tests.servers import redis_server  # noqa: PLC0415 (needs the repository)

    with (
        tempfile.TemporaryDirectory(prefix="clarion-digests-redis-") as workdir,
        redis_server(Path(workdir)) as url,
    ):
        args.redis_url = url
        return run_benchmark(args)


def run_benchmark(args: argparse.Namespace) -> int:
    started = datetime.now(UTC)
    prefix = f"bench-{secrets.token_hex(6)}"
    client = connect_sync(args.redis_url)
    result: dict[str, Any] = {
        **result_head(KIND, started, client),
        "parameters": {
            "cpu_count": os.cpu_count(),
            **{k: v for k, v in vars(args).items() if k != "redis_url"},
            "api_workers": API_WORKERS,
            "batch_size": BATCH_SIZE,
            "concurrency": CONCURRENCY,
            "joining_window": JOIN_WINDOW,
            "types": f"{DIGEST_TYPE} (digest, key data.thread_id, max_items 100) and "
            f"{PLAIN_TYPE} (none): NORMAL, EMAIL only",
            "key_prefix": prefix,
        },
        "targets": {
            "joined_per_s": TARGET_JOINED_PER_S,
            "close_lateness_p99_ms": TARGET_LATENESS_P99_MS,
        },
    }
    try:
        with tempfile.TemporaryDirectory(prefix="clarion-digests-") as temp:
            result |= run_parts(args, prefix, Path(temp))
    finally:
        deleted = delete_prefix(client, prefix)
        print(f"deleted {deleted} Redis keys under {prefix}*", flush=True)
        client.close()
    ok = not result["problems"]
    joined = result["joining"]["by_type"][DIGEST_TYPE]["notifications_per_s"]
    p99 = result["closing"]["lateness_ms"]["notification_made"]["p99"]
    result["pass"] = {
        "joined_per_s": ok and joined >= TARGET_JOINED_PER_S,
        "close_lateness_p99_ms": ok and p99 <= TARGET_LATENESS_P99_MS,
    }
    print_report(result)
    write_result(KIND, result, started)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
