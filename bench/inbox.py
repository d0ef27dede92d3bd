"""Inbox benchmark: realtime fan-out to Server-Sent Event streams held by one API process, and
inbox reads.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/inbox.py              # 5,000 streams, 1,000 messages/s for 20 s
    .venv/bin/python bench/inbox.py --quick      # 1,000 streams for 10 s

It starts the API (``clarion api --workers 1``: the streams are held by one process) and one
delivery worker (``clarion worker --slot 0``) on a fresh key prefix and database, with the
shipped catalog: ``order_confirmed`` goes to EMAIL, PUSH and IN_APP, and IN_APP to the
``inbox`` provider; the recipients have no address, so EMAIL and PUSH are suppressed at once.
Recipient tokens are made here with the digest secret the services are given.

1. Fan-out. N recipients (``--connections``) each open one ``GET /v1/inbox/stream`` from this
   process: a lean client on uvloop (a protocol, ``httptools`` for the chunked answer), in
   chunks of ``--chunk`` connections, each chunk held (its first ``counts`` event arrived)
   before the next opens. Then every 50 ms one ``POST /v1/notifications/batch`` carries
   ``rate / 20`` notifications, each to a random held recipient, for ``--seconds``. The time
   a batch request was sent is the acceptance time of its items (which is early: the latency
   includes the API's own time); the answer names each item's IN_APP delivery, which is the
   inbox message the ``message`` event carries. Its latency runs to the moment the event's
   bytes arrived on the stream of the recipient it was sent to; an event on another
   recipient's stream counts as wrong, one that never came (5 s after the last answer) as
   missing. CPU seconds of each process group are divided by the messages sent.
2. Reads. The streams are closed; a second API is started as ``clarion run`` starts it
   (``--read-workers``, default 2 uvicorn workers) on the same keys; a recipient of its own
   gets 20 messages, and wrk (2 threads, 64 connections, 10 s after a 1 s warm-up) sends
   ``GET /v1/inbox?limit=20`` with its token; every answer must be a 2xx.

Targets on two cores, with the load generator on them: at least 5,000 streams held and a
p99 of at most 250 ms at 1,000 messages/s (at least 95 % of it achieved); at least 5,000
reads/s. The result is printed and written to ``bench/results/inbox-<UTC timestamp>.json``.
The exit status is 1 when a message was lost, duplicated or sent to another recipient, a
stream could not be held or was dropped, a request failed or a service logged an error;
missing a target alone is not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httptools
import httpx
import msgspec
import redis
import uvloop

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.inbox.tokens import Grant, InboxTokens
from bench.harness import (
    API_KEY,
    BATCH_PATH,
    BENCH_DIGEST_SECRET,
    HEALTH_PATH,
    REPO,
    BatchReply,
    BenchError,
    CpuSnapshot,
    add_redis_url,
    api_client,
    clarion_executable,
    cpu_snapshot,
    create_database,
    delete_prefix,
    drop_database,
    format_table,
    free_port,
    log_findings,
    percentile,
    print_problems,
    redis_pid,
    result_head,
    running,
    service_env,
    verdict,
    wait_consumers,
    wait_healthy,
    write_result,
)
from streams.core.keys import KeySpace

CONNECTIONS = 5_000
QUICK_CONNECTIONS = 1_000
RATE = 1_000  # messages/s
SECONDS = 20
QUICK_SECONDS = 10
CHUNK = 250  # streams opened at once
TICK_S = 0.05  # one batch request per tick
HOLD_TIMEOUT_S = 30.0  # for a chunk of streams to get their first event
STRAGGLERS_S = 5.0  # after the last answer, for the events still on their way
RELEASE_S = 20.0  # for the API to close the streams the client closed (heartbeat: 15 s)
SEND_CONNECTIONS = 16  # of the batch poster

TARGET_CONNECTIONS = 5_000
TARGET_RATE = 1_000
TARGET_RATE_SHARE = 0.95
TARGET_P99_MS = 250.0
TARGET_READS = 5_000

PAGE = 20
WRK_THREADS = 2
WRK_CONNECTIONS = 64
WRK_SECONDS = 10
WRK_WARMUP_SECONDS = 1
TOKEN_TTL_S = 3600
READER = "reader"  # the recipient whose inbox wrk reads
SEND_HEADERS = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}


def recipient(index: int) -> str:
    return f"r-{index}"


def tokens_for(count: int) -> list[str]:
    """A recipient token for each stream's recipient, signed as the API signs them."""
    tokens = InboxTokens(BENCH_DIGEST_SECRET)
    expires = int(time.time()) + TOKEN_TTL_S
    return [tokens.make(Grant(recipient(i), expires)) for i in range(count)]


def raise_open_files_limit() -> int:
    """Raise this process's soft limit of open files to the hard one (the services started
    from it inherit it); the limit now."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def process_figures(pid: int) -> dict[str, int]:
    """Resident memory (MiB) and open files of process ``pid``."""
    status = (Path("/proc") / str(pid) / "status").read_text()
    rss_kib = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    return {"rss_mib": rss_kib // 1024, "open_files": len(os.listdir(f"/proc/{pid}/fd"))}


_TCP_STATES = {"01": "established", "08": "close_wait"}


def server_sockets(port: int) -> dict[str, int]:
    """The API's accepted connections on ``port`` by TCP state (``/proc/net/tcp``):
    established, and close_wait (the client closed, the server has not yet)."""
    found = dict.fromkeys(_TCP_STATES.values(), 0)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                local, _, state = line.split()[1:4]
                if int(local.rsplit(":", 1)[1], 16) == port and state in _TCP_STATES:
                    found[_TCP_STATES[state]] += 1
    return found


# --- the streams ----------------------------------------------------------------------------


class _Message(msgspec.Struct):
    id: str


class _MessageEvent(msgspec.Struct):
    message: _Message


_message_event = msgspec.json.Decoder(_MessageEvent)


@dataclass
class Board:
    """What was sent and what the streams saw, matched when the run is over."""

    # IN_APP delivery id -> (the stream of its recipient, when its batch request was sent)
    sent: dict[str, tuple[int, float]] = field(default_factory=dict)
    # message id -> (stream, when its event arrived), for every message event
    arrived: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    events: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)  # why streams were not held
    dropped: int = 0  # held streams that ended while the run went on
    arrival: asyncio.Event = field(default_factory=asyncio.Event)  # set by each message event

    def waiting(self, among: Iterable[str]) -> list[str]:
        """The messages of ``among`` not yet arrived on their recipient's stream."""
        return [
            message
            for message in among
            if all(stream != self.sent[message][0] for stream, _ in self.arrived.get(message, ()))
        ]


class EventStream(asyncio.Protocol):
    """One ``GET /v1/inbox/stream``: its chunked body parsed into events as they arrive."""

    def __init__(self, index: int, request: bytes, board: Board) -> None:
        self.index = index
        self.request = request
        self.board = board
        self.parser = httptools.HttpResponseParser(self)
        self.pending = b""  # an event's first part
        self.now = 0.0
        self.held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.closing = False  # closed by this side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of it
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.now = time.perf_counter()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._end(f"unparsable answer: {error}")

    def on_headers_complete(self) -> None:  # httptools callback
        status = self.parser.get_status_code()
        if status != 200:
            self._end(f"HTTP {status}")

    def on_body(self, body: bytes) -> None:  # httptools callback
        self.pending += body
        while b"\n\n" in self.pending:
            block, _, self.pending = self.pending.partition(b"\n\n")
            self._event(block)

    def on_message_complete(self) -> None:  # httptools callback
        self._end("the server ended the stream")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closing:
            self._end(f"connection lost: {exc!r}" if exc else "connection closed by the server")

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def _event(self, block: bytes) -> None:
        kind, data = b"", b""
        for line in block.split(b"\n"):
            name, _, value = line.partition(b": ")
            if name == b"event":
                kind = value
            elif name == b"data":
                data = value
        if not kind:
            return  # the retry field, a heartbeat comment
        self.board.events[kind.decode()] += 1
        if kind == b"counts" and not self.held.done():
            self.held.set_result(None)
        elif kind == b"message":
            message = _message_event.decode(data).message.id
            self.board.arrived.setdefault(message, []).append((self.index, self.now))
            self.board.arrival.set()

    def _end(self, why: str) -> None:
        if self.held.done():
            if not self.closing:
                self.board.dropped += 1
                self.board.failures[f"dropped: {why}"[:200]] += 1
        else:
            self.held.set_exception(BenchError(why))
        self.close()


async def open_streams(
    host: str, port: int, tokens: list[str], chunk: int, board: Board
) -> list[EventStream]:
    """Open a stream per token, ``chunk`` at a time, each chunk held before the next; the
    streams held."""
    loop = asyncio.get_running_loop()
    held: list[EventStream] = []

    async def one(index: int) -> EventStream:
        request = (
            f"GET /v1/inbox/stream?token={tokens[index]} HTTP/1.1\r\nhost: {host}:{port}\r\n"
            "accept: text/event-stream\r\n\r\n"
        ).encode()
        _, stream = await loop.create_connection(
            lambda: EventStream(index, request, board), host, port
        )
        try:
            await asyncio.wait_for(stream.held, HOLD_TIMEOUT_S)
        except (BenchError, TimeoutError):
            stream.close()
            raise
        return stream

    for start in range(0, len(tokens), chunk):
        indexes = range(start, min(start + chunk, len(tokens)))
        for outcome in await asyncio.gather(*(one(i) for i in indexes), return_exceptions=True):
            if isinstance(outcome, EventStream):
                held.append(outcome)
            else:
                board.failures[f"not held: {outcome!r}"[:200]] += 1
    return held


# --- sending -------------------------------------------------------------------------------


@dataclass
class Sending:
    """The batch requests of the fan-out."""

    batches: int = 0
    accepted: int = 0
    refused: int = 0
    failed_requests: int = 0
    first_problem: str = ""
    not_in_app: Counter[str] = field(default_factory=Counter)  # "<channel> <status>" -> count
    answer_ms: list[float] = field(default_factory=list)
    last_sent_at: float = 0.0

    def problem(self, text: str) -> None:
        self.first_problem = self.first_problem or text


_reply = msgspec.json.Decoder(BatchReply)
_encode = msgspec.json.Encoder().encode


def batch_body(tag: str, recipients: list[str]) -> bytes:
    """A batch of ``order_confirmed`` notifications, one to each recipient."""
    items = [
        {"idempotency_key": f"{tag}-{n}", "recipient": {"id": recipient_id},
         "type": "order_confirmed", "data": {"order_id": f"A-{tag}-{n}"}}
        for n, recipient_id in enumerate(recipients)
    ]  # fmt: skip
    return _encode({"notifications": items})


async def post_batch(
    api: httpx.AsyncClient, board: Board, sending: Sending, tag: str, recipients: list[int]
) -> None:
    """Post one batch; note its items' IN_APP deliveries, accepted when the request was sent."""
    sent_at = time.perf_counter()
    sending.batches += 1
    sending.last_sent_at = sent_at
    try:
        body = batch_body(tag, [recipient(index) for index in recipients])
        answer = await api.post(BATCH_PATH, content=body)
    except httpx.HTTPError as error:
        sending.failed_requests += 1
        sending.problem(f"batch {tag}: no answer: {error!r}")
        return
    sending.answer_ms.append((time.perf_counter() - sent_at) * 1000)
    if answer.status_code != 200:
        sending.failed_requests += 1
        sending.problem(f"batch {tag}: HTTP {answer.status_code} {answer.text[:300]}")
        return
    for index, item in zip(recipients, _reply.decode(answer.content).results, strict=True):
        if item.status_code != 202:
            sending.refused += 1
            sending.problem(f"item {item.idempotency_key}: {item.status_code} {item.detail}")
            continue
        sending.accepted += 1
        for delivery in item.deliveries or []:
            if delivery.channel == "IN_APP" and delivery.status == "QUEUED":
                board.sent[delivery.id] = (index, sent_at)
            else:
                sending.not_in_app[f"{delivery.channel} {delivery.status}"] += 1


async def send_messages(
    api: httpx.AsyncClient, board: Board, held: list[int], rate: int, seconds: int
) -> tuple[Sending, float]:
    """A batch every ``TICK_S`` to random held recipients, ``rate`` per second for
    ``seconds``, on schedule whatever the answers take; what was sent, and in how long
    (first request to the last request's tick)."""
    sending = Sending()
    per_tick, ticks = max(1, round(rate * TICK_S)), round(seconds / TICK_S)
    tag = secrets.token_hex(4)
    posts = []
    started = time.perf_counter()
    for tick in range(ticks):
        await asyncio.sleep(max(0.0, started + tick * TICK_S - time.perf_counter()))
        recipients = [random.choice(held) for _ in range(per_tick)]
        post = post_batch(api, board, sending, f"{tag}-{tick}", recipients)
        posts.append(asyncio.create_task(post))
    await asyncio.gather(*posts)
    return sending, sending.last_sent_at + TICK_S - started


async def stragglers(board: Board) -> float:
    """Wait up to ``STRAGGLERS_S`` for every message sent to arrive; how long it took."""
    started = time.perf_counter()
    waiting = board.waiting(board.sent)
    while waiting := board.waiting(waiting):
        left = started + STRAGGLERS_S - time.perf_counter()
        if left <= 0:
            break
        board.arrival.clear()
        with suppress(TimeoutError):
            await asyncio.wait_for(board.arrival.wait(), left)
    return time.perf_counter() - started


# --- the fan-out's figures -----------------------------------------------------------------


def matched(board: Board) -> dict[str, Any]:
    """Each message sent against the events that arrived: latencies, missing, wrong, repeated."""
    latencies: list[float] = []
    missing: list[str] = []
    wrong = repeated = 0
    for message, (index, sent_at) in board.sent.items():
        arrivals = board.arrived.get(message, [])
        right = [at for stream, at in arrivals if stream == index]
        wrong += len(arrivals) - len(right)
        repeated += max(0, len(right) - 1)
        if right:
            latencies.append((min(right) - sent_at) * 1000)
        else:
            missing.append(message)
    unknown = sum(1 for message in board.arrived if message not in board.sent)
    return {
        "messages_sent": len(board.sent),
        "events_received": sum(len(found) for found in board.arrived.values()),
        "missing": len(missing),
        "missing_examples": missing[:5],
        "wrong_recipient": wrong,
        "repeated": repeated,
        "unknown_messages": unknown,
        "latency_ms": {
            "count": len(latencies),
            **{f"p{p}": round(percentile(latencies, p), 1) for p in (50, 90, 99)},
            "max": round(max(latencies, default=0.0), 1),
        },
    }


async def fan_out(
    args: argparse.Namespace, base_url: str, api_pid: int, cpu: Callable[[], CpuSnapshot]
) -> dict[str, Any]:
    """Part 1: open and hold the streams, send, wait for stragglers, close the streams."""
    board = Board()
    host, port = base_url.removeprefix("http://").split(":")
    opening = time.perf_counter()
    streams = await open_streams(host, int(port), tokens_for(args.connections), args.chunk, board)
    opened_s = time.perf_counter() - opening
    holding = {**process_figures(api_pid), "sockets": server_sockets(int(port))["established"]}
    if not streams:
        raise BenchError(f"no stream was held: {dict(board.failures)}")
    before = cpu()
    async with api_client(base_url, SEND_CONNECTIONS) as api:
        indexes = [stream.index for stream in streams]
        sending, send_s = await send_messages(api, board, indexes, args.rate, args.seconds)
    waited_s = await stragglers(board)
    used = cpu().used(before)
    for stream in streams:
        stream.close()
    figures = matched(board)
    return {
        "connections_asked": args.connections,
        "connections_held": len(streams),
        "connections_not_held": args.connections - len(streams),
        "connections_dropped": board.dropped,
        "connection_failures": dict(board.failures.most_common(10)),
        "open_s": round(opened_s, 2),
        "api_while_holding": holding,
        "batches": sending.batches,
        "notifications_accepted": sending.accepted,
        "items_refused": sending.refused,
        "failed_requests": sending.failed_requests,
        "first_problem": sending.first_problem,
        "other_deliveries": dict(sending.not_in_app),
        "batch_answer_ms": {
            p: round(percentile(sending.answer_ms, int(p[1:])), 1) for p in ("p50", "p99")
        },
        "send_s": round(send_s, 3),
        "achieved_per_s": round(len(board.sent) / send_s, 1),
        "stragglers_waited_s": round(waited_s, 2),
        **figures,
        "events_by_kind": dict(board.events),
        "cpu_s": used,
        "cpu_us_per_message": {
            group: round(s * 1e6 / max(1, len(board.sent)), 1) for group, s in used.items()
        },
    }


# --- reads ---------------------------------------------------------------------------------


def fill_inbox(base_url: str, token: str) -> None:
    """Send ``PAGE`` messages to the reader and wait until its first page is full."""
    body = batch_body(f"reader-{secrets.token_hex(4)}", [READER] * PAGE)
    with httpx.Client(base_url=base_url, timeout=30) as client:
        answer = client.post(BATCH_PATH, content=body, headers=SEND_HEADERS)
        if answer.status_code != 200:
            raise BenchError(f"the reader's batch: HTTP {answer.status_code} {answer.text[:300]}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            page = client.get(
                f"/v1/inbox?limit={PAGE}", headers={"Authorization": f"Bearer {token}"}
            )
            if page.status_code == 200 and len(page.json()["messages"]) == PAGE:
                return
            time.sleep(0.1)
    raise BenchError(f"the reader's inbox did not show {PAGE} messages within 30 s")


_WRK_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def parse_wrk(output: str) -> dict[str, Any]:
    """Requests, requests/s, latency percentiles (ms), non-2xx answers and socket errors from
    wrk's text output (run with ``--latency``)."""
    done = re.search(r"(\d+) requests in ([\d.]+)(\w+),", output)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if done is None or rate is None:
        raise BenchError(f"wrk printed no result:\n{output}")
    latency = {
        f"p{pct}": round(float(value) * _WRK_UNITS[unit], 2)
        for pct, value, unit in re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s|m)\s*$", output, re.M)
    }
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                       output)  # fmt: skip
    return {
        "requests": int(done.group(1)),
        "requests_per_s": round(float(rate.group(1)), 1),
        "latency_ms": latency,
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": sum(int(n) for n in errors.groups()) if errors else 0,
    }


def run_wrk(url: str, token: str, seconds: int) -> dict[str, Any]:
    argv = ["wrk", f"-t{WRK_THREADS}", f"-c{WRK_CONNECTIONS}", f"-d{seconds}s", "--latency",
            "-H", f"Authorization: Bearer {token}", url]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    if done.returncode != 0:
        raise BenchError(f"wrk exited with {done.returncode}: {done.stderr.strip()}")
    return parse_wrk(done.stdout)


def reads(base_url: str, cpu: Callable[[], CpuSnapshot]) -> dict[str, Any]:
    """Part 2: the reader's inbox filled, then read by wrk."""
    token = InboxTokens(BENCH_DIGEST_SECRET).make(Grant(READER, int(time.time()) + TOKEN_TTL_S))
    fill_inbox(base_url, token)
    url = f"{base_url}/v1/inbox?limit={PAGE}"
    run_wrk(url, token, WRK_WARMUP_SECONDS)
    before = cpu()
    figures = run_wrk(url, token, WRK_SECONDS)
    used = cpu().used(before)
    return {
        **figures,
        "cpu_s": used,
        "cpu_us_per_request": {
            group: round(s * 1e6 / max(1, figures["requests"]), 1) for group, s in used.items()
        },
    }


# --- the run -------------------------------------------------------------------------------


def released(port: int, within_s: float) -> dict[str, Any]:
    """Wait up to ``within_s`` for the API to close the streams' connections (the client
    closed them); what is left then and how long that took."""
    started = time.monotonic()
    while True:
        left = server_sockets(port)
        waited = time.monotonic() - started
        if not any(left.values()) or waited > within_s:
            return {**left, "waited_s": round(waited, 1)}
        time.sleep(0.2)


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    prefix = f"bench-{secrets.token_hex(6)}"
    database = asyncio.run(create_database())
    port = free_port()
    env = service_env(prefix, args.redis_url, port, REPO / "clarion.toml")
    env["CLARION_DATABASE_URL"] = database.url
    clarion = str(clarion_executable())
    logs = {name: scratch / f"{name}.log" for name in ("api", "worker", "api_reads")}
    client = redis.Redis.from_url(args.redis_url)
    try:
        with ExitStack() as stack:
            api = stack.enter_context(running([clarion, "api", "--workers", "1"], env, logs["api"]))
            worker = stack.enter_context(
                running([clarion, "worker", "--slot", "0"], env, logs["worker"])
            )
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(api, base_url + HEALTH_PATH, logs["api"])
            wait_consumers(client, KeySpace(prefix, 1), [worker], [logs["worker"]])
            groups = {"api": [api.pid], "worker": [worker.pid]}
            server = redis_pid(args.redis_url)

            def cpu() -> CpuSnapshot:
                return cpu_snapshot(groups, server, postgres=False)

            figures: dict[str, Any] = {"api_before": process_figures(api.pid)}
            figures["fanout"] = uvloop.run(fan_out(args, base_url, api.pid, cpu))
            figures["api_sockets_after_closing"] = released(port, RELEASE_S)
            read_port = free_port()
            read_env = {**env, "CLARION_PORT": str(read_port)}
            read_command = [clarion, "api", "--workers", str(args.read_workers)]
            readers = stack.enter_context(running(read_command, read_env, logs["api_reads"]))
            read_url = f"http://127.0.0.1:{read_port}"
            wait_healthy(readers, read_url + HEALTH_PATH, logs["api_reads"])
            groups["api"] = [readers.pid]
            figures["reads"] = reads(read_url, cpu)
            figures["reads"]["api_workers"] = args.read_workers
    finally:
        delete_prefix(client, prefix)
        client.close()
        asyncio.run(drop_database(database))
    figures["logs"] = {name: log_findings(path) for name, path in logs.items()}
    return figures


def verdicts(figures: dict[str, Any]) -> dict[str, bool]:
    fanout = figures["fanout"]
    return {
        "connections": fanout["connections_held"] >= TARGET_CONNECTIONS,
        "latency": fanout["latency_ms"]["p99"] <= TARGET_P99_MS
        and fanout["achieved_per_s"] >= TARGET_RATE_SHARE * TARGET_RATE
        and fanout["missing"] == 0
        and fanout["wrong_recipient"] == 0,
        "reads": figures["reads"]["requests_per_s"] >= TARGET_READS,
    }


def problems_of(figures: dict[str, Any]) -> list[str]:
    """What makes the run fail, beyond a missed target."""
    fanout, read = figures["fanout"], figures["reads"]
    found = [
        f"fan-out: {fanout[name]} {text}"
        for name, text in [
            ("missing", "messages never arrived"),
            ("wrong_recipient", "events arrived on another recipient's stream"),
            ("repeated", "messages arrived more than once"),
            ("unknown_messages", "message events nobody sent"),
            ("connections_not_held", "streams could not be held"),
            ("connections_dropped", "held streams were ended by the server"),
            ("failed_requests", "batch requests failed"),
            ("items_refused", "notifications refused"),
        ]
        if fanout[name]
    ]
    if fanout["connection_failures"]:
        found.append(f"fan-out: stream failures {fanout['connection_failures']}")
    if fanout["first_problem"]:
        found.append(f"fan-out: first problem: {fanout['first_problem']}")
    left = figures["api_sockets_after_closing"]
    if left["established"] or left["close_wait"]:
        found.append(f"the API had not closed the streams' connections {left['waited_s']} s "
                     f"after the client did: {left}")  # fmt: skip
    if read["non_2xx"] or read["socket_errors"]:
        found.append(f"reads: {read['non_2xx']} non-2xx, {read['socket_errors']} socket errors")
    found += [
        f"{name}: {log['errors']} error lines, first: {log['first_error'][:300]}"
        for name, log in figures["logs"].items()
        if log["errors"]
    ]
    return found


def summary(args: argparse.Namespace, figures: dict[str, Any], passed: dict[str, bool]) -> str:
    fanout, read = figures["fanout"], figures["reads"]
    latency, read_latency = fanout["latency_ms"], read["latency_ms"]
    rows = [
        ["SSE streams held (one API process)", f"{fanout['connections_held']:,}",
         f">= {TARGET_CONNECTIONS:,}", verdict(passed["connections"])],
        ["  not held / dropped", f"{fanout['connections_not_held']} / "
         f"{fanout['connections_dropped']}", "0 / 0", ""],
        ["messages sent, per s achieved", f"{fanout['achieved_per_s']:,.0f}",
         f">= {TARGET_RATE_SHARE * TARGET_RATE:,.0f}", ""],
        ["  sent / events received", f"{fanout['messages_sent']:,} / "
         f"{fanout['events_received']:,}", "", ""],
        ["  missing / wrong recipient", f"{fanout['missing']} / {fanout['wrong_recipient']}",
         "0 / 0", ""],
        ["  latency p50 / p90 ms", f"{latency['p50']} / {latency['p90']}", "", ""],
        ["  latency p99 / max ms", f"{latency['p99']} / {latency['max']}",
         f"p99 <= {TARGET_P99_MS:.0f}", verdict(passed["latency"])],
        [f"GET /v1/inbox?limit={PAGE}, req/s ({read['api_workers']} API workers)",
         f"{read['requests_per_s']:,.0f}",
         f">= {TARGET_READS:,}", verdict(passed["reads"])],
        ["  latency p50 / p99 ms", f"{read_latency.get('p50')} / {read_latency.get('p99')}",
         "", ""],
        ["  non-2xx / socket errors", f"{read['non_2xx']} / {read['socket_errors']}", "0 / 0", ""],
    ]  # fmt: skip
    title = (
        f"inbox: {args.connections:,} streams asked, {args.rate:,} messages/s for "
        f"{args.seconds} s; wrk -t{WRK_THREADS} -c{WRK_CONNECTIONS} -d{WRK_SECONDS}s"
    )
    per_message = " ".join(f"{g} {us}" for g, us in fanout["cpu_us_per_message"].items())
    per_read = " ".join(f"{g} {us}" for g, us in read["cpu_us_per_request"].items())
    return "\n".join([
        title, "", format_table(["", "measured", "target", ""], rows), "",
        f"CPU µs per message: {per_message}", f"CPU µs per read: {per_read}",
        f"API while holding the streams: {fanout['api_while_holding']}",
    ])  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=CONNECTIONS, help="SSE streams")
    parser.add_argument("--rate", type=int, default=RATE, help="messages per second")
    parser.add_argument("--seconds", type=int, default=SECONDS, help="of sending")
    parser.add_argument("--chunk", type=int, default=CHUNK, help="streams opened at once")
    parser.add_argument(
        "--read-workers", type=int, default=2, help="uvicorn workers of the API the reads go to"
    )
    parser.add_argument(
        "--quick", action="store_true",
        help=f"--connections {QUICK_CONNECTIONS} --seconds {QUICK_SECONDS}",
    )  # fmt: skip
    add_redis_url(parser, "the services")
    args = parser.parse_args()
    if args.quick:
        args.connections, args.seconds = QUICK_CONNECTIONS, QUICK_SECONDS
    limit = raise_open_files_limit()
    if limit < args.connections + 1000:
        parser.error(f"{args.connections} streams need more open files than the limit, {limit}")
    started = datetime.now(UTC)
    client = redis.Redis.from_url(args.redis_url)
    head = result_head("inbox", started, client)
    client.close()
    with tempfile.TemporaryDirectory(prefix="clarion-bench-") as scratch:
        figures = run(args, Path(scratch))
    passed = verdicts(figures)
    problems = problems_of(figures)
    settings = {"connections": args.connections, "rate_per_s": args.rate,
                "seconds": args.seconds, "chunk": args.chunk,
                "open_files_limit": limit}  # fmt: skip
    targets = {"connections": TARGET_CONNECTIONS, "p99_ms": TARGET_P99_MS,
               "rate_per_s": TARGET_RATE, "reads_per_s": TARGET_READS}  # fmt: skip
    print(summary(args, figures, passed))
    print_problems(problems)
    result = {**head, "settings": settings, "targets": targets, "verdicts": passed, **figures,
              "problems": problems}  # fmt: skip
    write_result("inbox", result, started)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
