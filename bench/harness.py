"""What the benchmarks of ``bench/`` share: the one module they import from each other.

A benchmark script (``ingest.py``, ``pipeline.py``, ``projector.py``, ``memory.py``,
``peers.py``, ``instructions.py``, ``providers.py``, ``fcm_client.py``, ``webpush_client.py``,
``unsubscribe.py``, ``report.py``) imports shared code from here and from nowhere else in
``bench/``; what only one benchmark uses stays in its script. The sections:

- results: the repository, ``BenchError``, where results go and the fields they start with;
- command line and output: ``--redis-url``, text tables, the problems banner;
- figures: percentiles and the millisecond in ids and stream entry ids;
- processes: free ports, starting and stopping the services and peers, their logs;
- one provider adapter alone (``fcm_client``, ``webpush_client``): another checkout's code,
  sends kept in flight;
- the catalog without rate limits, and batch request bodies with their answers;
- Redis: deleting a run's keys, the work streams' progress, the sandbox provider's record,
  the events of an ``events`` stream;
- CPU time per process group, read from ``/proc`` (Linux only);
- PostgreSQL: a throwaway database and the read model's rows.

**One latest result per benchmark.** A benchmark writes its result to
``bench/results/<benchmark>-<UTC time>.json`` (the report a ``.json`` and ``.md`` pair) and
then removes the older results of the same benchmark from that directory, so it holds the
latest of each; earlier figures live in git's history and in ``bench/HISTORY.md``.
``bench/report.py`` runs the benchmarks with ``CLARION_BENCH_RESULTS`` naming a scratch
directory: it embeds their results in its own, and the benchmarks' latest results in
``bench/results/`` stay.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import asyncpg
import httpx
import msgspec
import redis
import redis.asyncio as aredis
from redis.cluster import RedisCluster

# Clarion's own code. All of the harness's imports of it are here: when a product module
# moves, this block is the harness's one place to follow it.
from app.catalog import Catalog, parse_catalog
from app.delivery.feeder import Feeder
from app.delivery.worker import DeliveryWorker
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.providers.registry import build_providers
from projections.database import ensure_database, quote_identifier
from streams.core import codec
from streams.core.consumer_groups import PROJECTOR_GROUP
from streams.core.keys import KeySpace, ShardKeys
from streams.core.vocabulary import Channel, Priority
from streams.recipients.settings import AddressDigest

REPO: Final = Path(__file__).resolve().parent.parent
# Where results go: bench/results/, or the scratch directory bench/report.py names.
RESULTS_DIR: Final = Path(os.environ.get("CLARION_BENCH_RESULTS") or REPO / "bench" / "results")
# What a benchmark prints after writing its result; bench/report.py finds the file by it.
WRITTEN: Final = "written to "

REDIS_URL: Final = os.environ.get("CLARION_REDIS_URL", "redis://127.0.0.1:6379/0")
API_KEY: Final = "bench-secret-key"  # must match wrk_post.lua
BENCH_DIGEST_SECRET: Final = b"bench-digest-secret"
BENCH_DIGEST: Final = AddressDigest(BENCH_DIGEST_SECRET)
HEALTH_PATH: Final = "/v1/ops/health"
SINGLE_PATH: Final = "/v1/notifications"
BATCH_PATH: Final = "/v1/notifications/batch"
BATCH_SIZE: Final = 1000  # items per batch request, in every benchmark that posts batches
DELIVERY_GROUP: Final = "delivery"  # the workers' consumer group (streams.delivery.GROUP)
SCAN_CHUNK: Final = 10_000  # stream entries per XRANGE
STARTUP_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 10.0
LOG_TAIL_LINES: Final = 40
FINDINGS_TAIL_LINES: Final = 10
FINDINGS_LINE_CHARS: Final = 1500


class BenchError(Exception):
    """The benchmark could not run (a server did not start, wrk printed no result)."""


# --- results --------------------------------------------------------------------------------


def git_output(*args: str) -> str | None:
    """What ``git <args>`` prints in the repository, or None (no git, not a checkout)."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return done.stdout if done.returncode == 0 else None


def git_commit() -> str | None:
    """The short commit hash of the work tree, or None (no git, no commit yet)."""
    return (git_output("rev-parse", "--short", "HEAD") or "").strip() or None


def machine_info(client: redis.Redis) -> dict[str, Any]:
    """What the numbers depend on: cores, versions, and how busy the machine already was."""
    if isinstance(client, RedisCluster):
        masters = client.get_primaries()
        server = client.info("server", target_nodes=masters[0])
    else:
        masters, server = [None], client.info("server")
    return {
        "cpu_count": os.cpu_count(),
        # Anything else running on these cores lowers every figure.
        "load_average_at_start": [round(load, 2) for load in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "redis_version": server.get("redis_version"),
        "redis_masters": len(masters),
        "git_commit": git_commit(),
    }


def result_head(kind: str, started: datetime, client: redis.Redis) -> dict[str, Any]:
    """The fields every benchmark result starts with: which, when, and on what machine."""
    return {
        "benchmark": kind,
        "started_utc": started.isoformat(timespec="seconds"),
        "machine": machine_info(client),
    }


def result_stem(kind: str, started: datetime) -> Path:
    """``<results>/<kind>-<UTC timestamp>``, without a suffix."""
    return RESULTS_DIR / f"{kind}-{started:%Y%m%dT%H%M%SZ}"


def remove_older_results(kind: str, stem: Path) -> None:
    """Remove the results of ``kind`` older than ``stem``'s (both ``.json`` and ``.md``).

    Older by the UTC time in the name, which sorts as text; a run that started later and
    finished first keeps its file.
    """
    named = re.compile(rf"{re.escape(kind)}-\d{{8}}T\d{{6}}Z\.(json|md)")
    for path in stem.parent.iterdir():
        if named.fullmatch(path.name) and path.stem < stem.name:
            path.unlink()


def shown(path: Path) -> str:
    """``path`` relative to the repository where it is inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def write_result(kind: str, result: dict[str, Any], started: datetime) -> Path:
    """Write ``<results>/<kind>-<UTC timestamp>.json``, remove the older results of ``kind``
    and print where it went (the line ``bench/report.py`` looks for)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = result_stem(kind, started)
    path = stem.with_suffix(".json")
    path.write_text(json.dumps(result, indent=2) + "\n")
    remove_older_results(kind, stem)
    print(f"\n{WRITTEN}{shown(path)}")
    return path


# --- command line and output ----------------------------------------------------------------


def add_redis_url(parser: argparse.ArgumentParser, used_by: str) -> None:
    """The ``--redis-url`` option every benchmark takes."""
    parser.add_argument(
        "--redis-url",
        default=REDIS_URL,
        help=f"Redis for {used_by} (default: $CLARION_REDIS_URL or local)",
    )


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns sized to their widest cell; the first left-aligned, numbers right-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    rule = "-" * len(line(header))
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_problems(problems: list[str], heading: str = "PROBLEMS:") -> None:
    """Print what went wrong in a run, in a banner nobody can miss (nothing if all went well)."""
    if not problems:
        return
    print("!" * 72)
    print(heading)
    for problem in problems:
        print(f"  - {problem}")
    print("!" * 72)


# --- figures --------------------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, round(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def latency_summary(values: list[float]) -> dict[str, float]:
    return {
        "count": len(values),
        "p50": round(percentile(values, 50), 1),
        "p99": round(percentile(values, 99), 1),
        "max": round(max(values, default=0.0), 1),
    }


def id_ms(uuid7: str) -> int:
    """The creation ms in the first 48 bits of a UUIDv7 (see streams/core/ids.py)."""
    return int(uuid7[:8] + uuid7[9:13], 16)


def entry_ms(entry_id: bytes | str) -> int:
    """The ms part of a stream entry id."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])


# --- processes ------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a server log."""
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL to the process group if the process does not stop in time."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)  # uvicorn's supervisor then stops its workers
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # start_new_session made the process the leader of its own group: this reaches its
        # workers too, and nothing else.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextmanager
def running(
    argv: list[str], env: dict[str, str] | None, log_path: Path, cwd: Path = REPO
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a process (its own session, output to ``log_path``; ``env`` None: this one's)
    until the block ends."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield process
        finally:
            stop(process)


def wait_listening(process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    """Wait until something listens on 127.0.0.1:``port`` (a peer); fail early if the
    process exits."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError(f"the peer exited with {process.returncode}:\n{log_tail(log_path)}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise BenchError(f"the peer does not listen on {port}:\n{log_tail(log_path)}")


def wait_healthy(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    """Poll ``url`` until it answers 200; fail early if the server process exits."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError(
                f"server exited with {process.returncode} before answering {url}:\n"
                + log_tail(log_path)
            )
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        time.sleep(0.2)
    raise BenchError(
        f"{url} did not answer 200 within {STARTUP_TIMEOUT_S} s:\n" + log_tail(log_path)
    )


def clarion_executable() -> Path:
    """The ``clarion`` entry point beside the python running this script."""
    clarion = Path(sys.executable).parent / "clarion"
    if not clarion.exists():
        raise BenchError(f"{clarion} not found: run this with the project's .venv/bin/python")
    return clarion


def service_env(
    prefix: str, redis_url: str, port: int, catalog: Path, shards: int = 1
) -> dict[str, str]:
    """The environment of Clarion's processes in a benchmark: quiet, on their own prefix and
    their own database (``prefix_database``; ``delete_prefix`` drops it), never the machine's
    ``clarion`` database."""
    return {
        "CLARION_SHARDS": str(shards),
        **os.environ,
        "CLARION_DATABASE_URL": prefix_database(prefix).url,
        "CLARION_API_KEYS": f"bench:{API_KEY}:send+read",
        "CLARION_DIGEST_SECRET": BENCH_DIGEST_SECRET.decode(),
        "CLARION_KEY_PREFIX": prefix,
        "CLARION_REDIS_URL": redis_url,
        "CLARION_HOST": "127.0.0.1",
        "CLARION_PORT": str(port),
        "CLARION_LOG_LEVEL": "WARNING",
        "CLARION_CONFIG": str(catalog),
    }


def wait_consumers(
    client: redis.Redis, keys: KeySpace, workers: list[Any], logs: list[Path]
) -> None:
    """Wait until every worker reads the HIGH stream (each has read it once)."""
    stream = keys.shard(0).work(Priority.HIGH)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for process, log_path in zip(workers, logs, strict=True):
            if process.poll() is not None:
                raise BenchError(f"worker exited with {process.returncode}:\n{log_tail(log_path)}")
        try:
            consumers: Any = client.xinfo_consumers(stream, DELIVERY_GROUP)
        except redis.ResponseError:
            consumers = []  # no stream or group yet
        if len(consumers) >= len(workers):
            return
        time.sleep(0.1)
    raise BenchError(f"the {len(workers)} workers did not start reading within 30 s")


def log_findings(path: Path) -> dict[str, Any]:
    """Lines a service logged (WARNING and up), the errors among them, the first error, a tail.

    Long lines (tracebacks in JSON) are cut to ``FINDINGS_LINE_CHARS``.
    """
    text = path.read_text(errors="replace") if path.exists() else ""
    lines = text.replace(f"{REPO}/", "").splitlines()  # no machine paths in the result
    errors = [line for line in lines if re.search(r'"level":\s*"(error|critical)"|Traceback', line)]
    events = Counter(
        match.group(1) for line in lines if (match := re.search(r'"event":\s*"([^"]*)"', line))
    )
    return {
        "lines": len(lines),
        "errors": len(errors),
        "events": dict(events.most_common(10)),
        "first_error": errors[0][:FINDINGS_LINE_CHARS] if errors else "",
        "tail": [line[:FINDINGS_LINE_CHARS] for line in lines[-FINDINGS_TAIL_LINES:]],
    }


# --- the catalog ----------------------------------------------------------------------------


@dataclass
class FedWorker:
    """A delivery worker with the fairness feeder beside it, as a worker process runs them:
    without the feeder, work items queued behind a full work stream would never be sent."""

    worker: DeliveryWorker
    feeder: Feeder
    shards: list[ShardKeys]
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        feeding = asyncio.create_task(self.feeder.run(self.shards, self.stopping))
        try:
            await self.worker.run()
        finally:
            self.stopping.set()
            await feeding

    def stop(self) -> None:
        self.worker.stop()
        self.stopping.set()


def in_process(
    client: aredis.Redis, keys: KeySpace, catalog: Catalog, idempotency_ttl_s: int = 3600
) -> tuple[Ingestor, FedWorker]:
    """An ingestor and a delivery worker (with its feeder) in this process, built as the API
    and a worker process build theirs (with the sandbox providers of ``catalog``)."""
    ingestor = Ingestor(client, keys, Planner(catalog, BENCH_DIGEST), idempotency_ttl_s)
    providers = build_providers(catalog, client, keys)
    worker = DeliveryWorker(
        client, keys, catalog, providers, consumer="bench-0", address_digest=BENCH_DIGEST
    )
    return ingestor, FedWorker(worker, Feeder(client, catalog.fairness), keys.all_shards())


def unlimited_catalog(source: Path, target: Path, *, inbox: bool = False) -> list[str]:
    """Copy ``source`` to ``target`` without any provider's rate limit, and with IN_APP on the
    sandbox unless ``inbox``; the providers whose limit went.

    The ``rate_limit = ...`` lines are dropped as text (the catalog keeps its comments and
    order); the copy is then parsed to make sure nothing else changed. IN_APP goes to the
    sandbox as every other channel does, so these benchmarks find every delivery in the
    sandbox's record and stay comparable with their earlier runs (``bench/inbox.py``
    measures the inbox).
    """
    text = source.read_text()
    kept = [line for line in text.splitlines() if not re.match(r"\s*rate_limit\s*=", line)]
    copy = "\n".join(kept) + "\n"
    target.write_text(copy if inbox else copy.replace(IN_APP_INBOX, IN_APP_SANDBOX))
    before = parse_catalog(text, str(source))
    after = parse_catalog(target.read_text(), str(target))
    if any(provider.rate_limit is not None for provider in after.providers.values()):
        raise BenchError(f"{source}: a rate_limit is not on one line; cannot remove it")
    in_app = Channel.IN_APP
    if after.types != before.types or {**after.channels, in_app: None} != {
        **before.channels,
        in_app: None,
    }:
        raise BenchError(f"{source}: removing the rate limits changed more than them")
    if not inbox and in_app in after.channels and after.channels[in_app].provider != "sandbox":
        raise BenchError(f"{source}: IN_APP is not on the inbox; cannot move it to the sandbox")
    return sorted(name for name, p in before.providers.items() if p.rate_limit is not None)


IN_APP_INBOX: Final = '[channels.IN_APP]\nprovider = "inbox"'
IN_APP_SANDBOX: Final = '[channels.IN_APP]\nprovider = "sandbox"'


# --- batch request bodies -------------------------------------------------------------------

OTP_EVERY: Final = 5  # every 5th end-to-end item is an otp, the others order_confirmed


def batch_pieces(size: int, item: Callable[[int], bytes]) -> list[bytes]:
    """Pieces of a batch body of ``size`` items, to be joined with a batch tag.

    ``item(i)`` is item ``i`` after its idempotency key's tag, starting ``-<i>"``.
    ``tag.join(pieces)`` puts the tag in front of every item's idempotency key, so a fresh
    body with unique keys costs one bytes.join instead of encoding 1000 items: the client's
    own encoding must not use the CPU the server is being measured with.
    """
    pieces = [b'{"notifications": [{"idempotency_key": "']
    for i in range(size):
        more = b', {"idempotency_key": "' if i < size - 1 else b"]}"
        pieces.append(item(i) + more)
    return pieces


def ingest_item(i: int) -> bytes:
    """Item ``i`` of the ingest benchmark's batches (instructions.py counts the same):
    ``order_confirmed`` with a phone number and an email address."""
    return (
        b'-%d", "recipient": {"id": "user-%d", "phone": "+4915112345678", '
        b'"email": "user@example.com"}, "type": "order_confirmed", '
        b'"data": {"order_id": "%d"}}' % (i, i, i)
    )


def e2e_item(i: int) -> bytes:
    """End-to-end item ``i`` (pipeline.py, and projector.py's lag phase): an otp or an
    order_confirmed."""
    if i % OTP_EVERY == 0:
        return (
            b'-%d", "recipient": {"id": "user-%d", "phone": "+4915112345678"}, '
            b'"type": "otp", "data": {"code": "%06d"}}' % (i, i, i)
        )
    return (
        b'-%d", "recipient": {"id": "user-%d", "email": "user%d@example.com", '
        b'"push_tokens": ["token-%d"]}, "type": "order_confirmed", '
        b'"data": {"order_id": "A-%d"}}' % (i, i, i, i, i)
    )


def expected_e2e_deliveries(size: int) -> int:
    """Deliveries one end-to-end batch of ``size`` items should queue."""
    otps = len(range(0, size, OTP_EVERY))
    return otps + 3 * (size - otps)


# --- batch answers --------------------------------------------------------------------------


class Delivery(msgspec.Struct):
    id: str
    channel: str
    status: str


class ItemResult(msgspec.Struct):
    status_code: int
    idempotency_key: str = ""
    id: str | None = None
    deliveries: list[Delivery] | None = None
    detail: str | None = None


class BatchReply(msgspec.Struct):
    results: list[ItemResult]


@dataclass
class Ingested:
    """What the API accepted in one phase."""

    notifications: int = 0
    refused: int = 0
    failed_requests: int = 0
    first_problem: str = ""
    queued: dict[str, str] = field(default_factory=dict)  # delivery id -> channel
    not_queued: Counter[str] = field(default_factory=Counter)  # status -> count
    first_accept_ms: int | None = None  # the ms in the first accepted notification's id
    first_send_ms: int | None = None  # wall clock when the first request was sent
    # Queued delivery id -> wall-clock ms at which the client sent the batch carrying it:
    # when the delivery's clock starts in bench/peers.py, before the API saw it.
    sent_ms: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def note(self, notification_id: str, deliveries: list[Delivery], sent_ms: int = 0) -> None:
        self.notifications += 1
        ms = id_ms(notification_id)
        if self.first_accept_ms is None or ms < self.first_accept_ms:
            self.first_accept_ms = ms
        for delivery in deliveries:
            if delivery.status == "QUEUED":
                self.queued[delivery.id] = delivery.channel
                self.sent_ms[delivery.id] = sent_ms
            else:
                self.not_queued[delivery.status] += 1

    def problem(self, text: str) -> None:
        self.first_problem = self.first_problem or text

    def summary(self) -> dict[str, Any]:
        seconds = self.elapsed_s or float("inf")
        return {
            "notifications_accepted": self.notifications,
            "items_refused": self.refused,
            "failed_requests": self.failed_requests,
            "first_problem": self.first_problem,
            "deliveries_queued": len(self.queued),
            "deliveries_not_queued": dict(self.not_queued),
            "ingest_elapsed_s": round(self.elapsed_s, 3),
            "ingest_notifications_per_s": round(self.notifications / seconds, 1),
        }


def api_client(base_url: str, connections: int, *, keepalive: bool = True) -> httpx.AsyncClient:
    """A client for the API. Batch posters pass ``keepalive=False``: a new connection per
    batch goes to whichever server worker accepts first, while a few kept-alive ones may
    all land on one worker (see ``bench/ingest.py``)."""
    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
        timeout=120.0,
        limits=httpx.Limits(
            max_connections=connections,
            max_keepalive_connections=connections if keepalive else 0,
        ),
    )


async def post_batches(
    client: httpx.AsyncClient, pieces: list[bytes], batches: int, tag: str, concurrency: int
) -> Ingested:
    """Post ``batches`` batch requests from ``concurrency`` loops; what was accepted."""
    decoder = msgspec.json.Decoder(BatchReply)
    numbers = iter(range(batches))
    result = Ingested()

    async def loop() -> None:
        for number in numbers:
            body = f"{tag}-b{number}".encode().join(pieces)
            sent_ms = time.time_ns() // 1_000_000
            if result.first_send_ms is None:
                result.first_send_ms = sent_ms
            try:
                response = await client.post(BATCH_PATH, content=body)
            except httpx.HTTPError as error:
                result.failed_requests += 1
                result.problem(f"batch {number}: no answer: {error!r}")
                return
            if response.status_code != 200:
                result.failed_requests += 1
                result.problem(f"batch {number}: HTTP {response.status_code} {response.text[:300]}")
                continue
            for item in decoder.decode(response.content).results:
                if item.status_code == 202 and item.id is not None:
                    result.note(item.id, item.deliveries or [], sent_ms)
                else:
                    result.refused += 1
                    result.problem(f"item {item.idempotency_key}: {item.status_code} {item.detail}")

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    result.elapsed_s = time.perf_counter() - started
    return result


# --- Redis: a run's keys, the work streams, the sandbox's record, the events ---------------


def delete_prefix(client: redis.Redis, prefix: str) -> int:
    """UNLINK every key of ``prefix``: ``prefix…`` and hash-tagged ``{prefix…`` names; and
    drop the database the services of that prefix used (``service_env``).

    ``prefix…`` also covers the runs a benchmark keys under ``<prefix>-<run>``.
    """
    deleted = 0
    drop_prefix_database(prefix)
    for pattern in (f"{prefix}*", f"{{{prefix}*"):
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=5000):
            batch.append(key)
            if len(batch) >= 5000:
                deleted += client.unlink(*batch)
                batch.clear()
        if batch:
            deleted += client.unlink(*batch)
    return deleted


async def group_done(client: aredis.Redis, stream: str) -> bool:
    """True once the projector group has read every entry and acknowledged them all."""
    groups: Any = await client.xinfo_groups(stream)
    for group in groups:
        if group["name"] in (PROJECTOR_GROUP, PROJECTOR_GROUP.encode()):
            return int(group["pending"]) == 0 and group["lag"] is not None and group["lag"] == 0
    return False


async def last_entry_id(client: aredis.Redis, stream: str) -> str:
    """The id of the newest entry of ``stream`` ("0-0" when there is none)."""
    newest: Any = await client.xrevrange(stream, "+", "-", count=1)
    return newest[0][0].decode() if newest else "0-0"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def work_state(client: aredis.Redis, keys: KeySpace) -> dict[str, Any]:
    """Per work stream: length, pending entries and lag of the delivery group; the producers
    with items queued for it; delayed, dlq."""
    state: dict[str, Any] = {}
    for shard in keys.all_shards():
        for priority in Priority:
            stream = shard.work(priority)
            groups: Any = await client.xinfo_groups(stream) if await client.exists(stream) else []
            group = next((g for g in groups if _text(g["name"]) == DELIVERY_GROUP), None)
            state[stream] = {
                "xlen": await client.xlen(stream),
                "pending": int(group["pending"]) if group else None,
                "lag": None if group is None or group["lag"] is None else int(group["lag"]),
            }
            # Producers with items queued behind a full work stream (``streams.delivery.fairness``).
            queued = shard.queued_producers(priority)
            state[queued] = {"producers_waiting": await client.scard(queued)}
        state[shard.delayed] = {"zcard": await client.zcard(shard.delayed)}
        state[shard.dlq] = {"xlen": await client.xlen(shard.dlq)}
    return state


def remaining_work(
    state: dict[str, Any], priorities: tuple[Priority, ...] = tuple(Priority)
) -> int:
    """Work not yet finished in ``state``: unread (lag), pending, queued for a work stream
    (counted by producer), delayed."""
    suffixes = tuple(f":work:{p.value.lower()}" for p in priorities)
    total = 0
    for name, figures in state.items():
        if name.endswith(suffixes):
            # A lag Redis cannot tell (None) counts as unknown work.
            total += (figures["pending"] or 0) + (1 if figures["lag"] is None else figures["lag"])
        elif name.endswith(":delayed"):
            total += figures["zcard"]
        elif "producers_waiting" in figures and any(
            name.endswith(f":queued:{p.stream_name}") for p in priorities
        ):
            total += figures["producers_waiting"]
    return total


def pending_total(state: dict[str, Any]) -> int:
    return sum(f.get("pending") or 0 for f in state.values())


@dataclass
class SandboxRecord:
    """The sandbox's record of one phase, by delivery id."""

    first_sent_ms: dict[str, int] = field(default_factory=dict)  # delivery id -> ms
    entries: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    repeated_sends: int = 0  # a second `sent` record for a delivery id
    flagged_duplicates: int = 0  # records the sandbox itself marked duplicate=1
    last_sent_ms: int = 0


async def read_sandbox(client: aredis.Redis, stream: str, after: str) -> SandboxRecord:
    """Every record of ``stream`` newer than entry id ``after``."""
    record = SandboxRecord()
    start = f"({after}"
    while True:
        chunk: Any = await client.xrange(stream, start, "+", count=SCAN_CHUNK)
        for raw_id, fields in chunk:
            record.entries += 1
            outcome = fields[b"outcome"].decode()
            record.outcomes[outcome] += 1
            if fields.get(b"duplicate") == b"1":
                record.flagged_duplicates += 1
            if outcome != "sent":
                continue
            delivery_id = fields[b"delivery_id"].decode()
            ms = entry_ms(raw_id)
            if delivery_id in record.first_sent_ms:
                record.repeated_sends += 1
            else:
                record.first_sent_ms[delivery_id] = ms
            record.last_sent_ms = max(record.last_sent_ms, ms)
        if len(chunk) < SCAN_CHUNK:
            return record
        start = f"({chunk[-1][0].decode()}"


def check_deliveries(
    queued: dict[str, str], record: SandboxRecord, name: str
) -> tuple[dict[str, Any], list[str]]:
    """Accepted deliveries against the sandbox record: figures and problems."""
    missing = [d for d in queued if d not in record.first_sent_ms]
    unexpected = sum(1 for d in record.first_sent_ms if d not in queued)
    figures = {
        "deliveries_sent": len(record.first_sent_ms),
        "deliveries_missing": len(missing),
        "missing_examples": missing[:5],
        "sandbox_entries": record.entries,
        "sandbox_outcomes": dict(record.outcomes),
        "repeated_sends": record.repeated_sends,
        "sandbox_flagged_duplicates": record.flagged_duplicates,
        "unexpected_sends": unexpected,
    }
    problems = []
    if missing:
        problems.append(f"{name}: {len(missing)} accepted deliveries never reached the sandbox")
    if record.repeated_sends or record.flagged_duplicates:
        problems.append(
            f"{name}: {record.repeated_sends} repeated sends, "
            f"{record.flagged_duplicates} records flagged duplicate"
        )
    if unexpected:
        problems.append(f"{name}: {unexpected} sends of deliveries nobody accepted")
    other = {k: v for k, v in record.outcomes.items() if k != "sent"}
    if other:
        problems.append(f"{name}: sandbox outcomes other than sent: {other}")
    return figures, problems


class _Tagged(msgspec.Struct):
    type: str  # the event's tag; every other field is skipped


_tags = msgspec.json.Decoder(list[_Tagged])


@dataclass
class StreamEvents:
    """What an ``events`` stream holds."""

    entries: int = 0
    events: int = 0
    by_type: Counter[str] = field(default_factory=Counter)
    events_per_entry: Counter[int] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "events": self.events,
            "events_by_type": dict(self.by_type.most_common()),
            "entries_by_event_count": dict(sorted(self.events_per_entry.items())),
        }


async def stream_events(client: aredis.Redis, stream: str) -> StreamEvents:
    """Count the entries and events of ``stream`` (each entry a JSON array of events)."""
    found = StreamEvents()
    start = "-"
    name = codec.EVENT_FIELD.encode()
    while True:
        chunk: Any = await client.xrange(stream, start, "+", count=SCAN_CHUNK)
        for _, fields in chunk:
            tags = _tags.decode(fields.get(name, b"[]"))
            found.entries += 1
            found.events += len(tags)
            found.events_per_entry[len(tags)] += 1
            found.by_type.update(tag.type for tag in tags)
        if len(chunk) < SCAN_CHUNK:
            return found
        last = chunk[-1][0]
        start = f"({last.decode() if isinstance(last, bytes) else last}"


# --- CPU time per process group, from /proc -------------------------------------------------
#
# A benchmark takes a ``cpu_snapshot`` before and after its load; ``CpuSnapshot.used`` gives
# the CPU seconds (user + system) each group of processes spent in between:
#
# - a service started by the benchmark: the process and all its descendants (uvicorn's
#   workers are children of ``clarion api``);
# - Redis: the server whose ``process_id`` Redis itself reports;
# - PostgreSQL: every process named ``postgres`` (backends come and go; only a server on this
#   machine is seen).
#
# Divided by the work done, that is what a notification or a delivery costs each part, and
# how many cores a rate needs: the figure that tells whether a target fits a machine at all.

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class _Process:
    parent: int
    name: str
    cpu_s: float


def _read_processes() -> dict[int, _Process]:
    processes: dict[int, _Process] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # "pid (name) state ppid ..."; the name may hold spaces and parentheses.
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        user, system = int(fields[11]), int(fields[12])
        processes[int(entry.name)] = _Process(int(fields[1]), name, (user + system) / _TICKS)
    return processes


@dataclass(frozen=True, slots=True)
class CpuSnapshot:
    """CPU seconds used so far by each group of processes."""

    seconds: dict[str, float]

    def used(self, since: CpuSnapshot) -> dict[str, float]:
        """CPU seconds each group used between ``since`` and this snapshot.

        A process that ended in between takes its time with it, so a group whose processes
        were replaced may show less than it used.
        """
        return {
            group: round(max(0.0, value - since.seconds.get(group, 0.0)), 3)
            for group, value in self.seconds.items()
        }


def redis_pid(redis_url: str) -> int | None:
    """The pid of the Redis server at ``redis_url`` if it runs on this machine (a process of
    the pid it reports, named ``redis-server``, exists here); else None."""
    client = redis.Redis.from_url(redis_url)
    try:
        pid = client.info("server").get("process_id")
    finally:
        client.close()
    if not isinstance(pid, int):
        return None
    process = _read_processes().get(pid)
    return pid if process is not None and process.name == "redis-server" else None


def cpu_snapshot(
    services: dict[str, list[int]], redis_server: int | None, *, postgres: bool = True
) -> CpuSnapshot:
    """CPU seconds so far of each named group of service processes (each with its
    descendants), of the Redis server of pid ``redis_server``, of all ``postgres`` processes,
    and of this process alone (the benchmark's own load generator: ``bench``)."""
    processes = _read_processes()
    children: dict[int, list[int]] = {}
    for pid, process in processes.items():
        children.setdefault(process.parent, []).append(pid)

    def tree(root: int) -> float:
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid in processes:
                total += processes[pid].cpu_s
            todo += children.get(pid, [])
        return total

    seconds = {name: sum(tree(pid) for pid in pids) for name, pids in services.items()}
    if redis_server is not None:
        seconds["redis"] = processes[redis_server].cpu_s if redis_server in processes else 0.0
    if postgres:
        seconds["postgresql"] = sum(p.cpu_s for p in processes.values() if p.name == "postgres")
    own = processes.get(os.getpid())
    seconds["bench"] = own.cpu_s if own is not None else 0.0
    return CpuSnapshot(seconds)


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` (user and system, every thread)."""
    raw = (Path("/proc") / str(pid) / "stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


# --- one provider adapter alone -----------------------------------------------------------

# Set to a checkout's path while a benchmark measures that checkout's code (``--source``).
SOURCE_VARIABLE: Final = "CLARION_BENCH_SOURCE"


def measure_source(source: Path, script: str) -> None:
    """Make Clarion's modules come from ``source``: when it is not this checkout, start
    ``script`` again with ``SOURCE_VARIABLE`` set (the script puts it first on ``sys.path``
    before importing anything of Clarion's); else return."""
    if source != REPO and os.environ.get(SOURCE_VARIABLE) != str(source):
        env = {**os.environ, SOURCE_VARIABLE: str(source)}
        os.execve(sys.executable, [sys.executable, script, *sys.argv[1:]], env)


async def send_all(send: Callable[[Any], Any], batch: list[Any], in_flight: int) -> None:
    """``send`` each item of ``batch``, ``in_flight`` at a time: that many tasks, each
    sending one item after the other."""

    async def sender(start: int) -> None:
        for item in batch[start::in_flight]:
            await send(item)

    await asyncio.gather(*(sender(start) for start in range(in_flight)))


# --- PostgreSQL: a throwaway database and the read model's rows ---------------------------

# A URL naming a database that exists on the server (the maintenance database by default).
SERVER_URL: Final = os.environ.get(
    "CLARION_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
READ_MODEL_TABLES: Final = ("notification", "delivery", "delivery_event", "projection_checkpoint")


def with_database(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead of its own."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, v) for k, v in pairs if k not in {"dbname", "database"}])
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(name, safe=""), query, ""))


@dataclass(frozen=True, slots=True)
class Throwaway:
    """A benchmark's own database: its name and the URL the services connect with."""

    name: str
    url: str
    server_url: str


async def create_database(server_url: str = SERVER_URL) -> Throwaway:
    """Create an empty ``clarion_bench_<hex>`` database (tables come with ``connect``)."""
    name = f"clarion_bench_{secrets.token_hex(6)}"
    url = with_database(server_url, name)
    await ensure_database(url)
    return Throwaway(name, url, server_url)


def prefix_database(prefix: str) -> Throwaway:
    """The database of the services run under ``prefix``, named for it (``clarion_bench_…``),
    so that the run's clean-up finds it by the prefix alone. The API creates it on start."""
    name = "clarion_" + re.sub(r"[^a-z0-9_]", "_", prefix.lower())
    return Throwaway(name, with_database(SERVER_URL, name), SERVER_URL)


def drop_prefix_database(prefix: str) -> None:
    """Drop ``prefix_database(prefix)`` if it exists; a server that cannot be reached is
    reported, not raised (a benchmark that used no database still cleans up its keys)."""
    database = prefix_database(prefix)
    try:
        asyncio.run(drop_database(database))
    except (OSError, asyncpg.PostgresError) as error:
        print(f"could not drop the database {database.name}: {error}", file=sys.stderr)


async def drop_database(database: Throwaway) -> None:
    """Drop the database, disconnecting whoever still uses it."""
    connection = await asyncpg.connect(database.server_url)
    try:
        await connection.execute(
            f"DROP DATABASE IF EXISTS {quote_identifier(database.name)} WITH (FORCE)"
        )
    finally:
        await connection.close()


async def truncate_read_model(pool: asyncpg.Pool) -> None:
    """Empty every read-model table (the schema and partitions stay)."""
    async with pool.acquire() as connection:
        await connection.execute(f"TRUNCATE {', '.join(READ_MODEL_TABLES)}")


async def row_counts(pool: asyncpg.Pool) -> dict[str, Any]:
    """Rows per read-model table, and deliveries per status."""
    async with pool.acquire() as connection:
        counts: dict[str, Any] = {
            table: await connection.fetchval(f"SELECT count(*) FROM {table}")
            for table in READ_MODEL_TABLES
        }
        statuses = await connection.fetch(
            "SELECT status, count(*) AS n FROM delivery GROUP BY status ORDER BY status"
        )
    counts["delivery_by_status"] = {row["status"]: row["n"] for row in statuses}
    return counts
