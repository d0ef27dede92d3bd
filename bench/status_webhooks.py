"""Status-webhook benchmark: how fast the status-webhooks process POSTs final statuses to a
local receiver.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/status_webhooks.py              # 50,000 final statuses
    .venv/bin/python bench/status_webhooks.py --quick      # 10,000

Under a fresh key prefix it writes, as ingest and the delivery workers would, events
entries into shard 0's ``events`` stream: for each 64 notifications one entry with their
``NotificationAccepted`` and ``DeliveryQueued`` events, then one entry with their
``DeliverySent`` events (a final status each). The producer ``bench`` has a status webhook
to the receiver of ``tests/peers/webhook.py`` (uvicorn, every signature verified with the
``standardwebhooks`` library), which runs in a process of its own; a second producer,
``quiet``, has a webhook too but sends nothing, and ``other`` has none. Then it starts
``clarion status-webhooks`` and waits until the receiver has accepted every status.

It runs twice: one status per POST (what a producer gets unless it asks otherwise), then
batches of up to 100 (``max_batch``, the producer's opt-in; ``--max-batch N`` picks the runs).
Statuses/s run from the first status the receiver accepted to the last (the process's
start-up is left out); CPU per status is the CPU time the status-webhooks process, the
receiver, Redis and the benchmark's own polling used in that time, divided by the statuses
accepted in it. Every status must arrive
exactly once (the receiver counts repeats of a ``webhook-id``, and of each status of a
batch) with a valid signature. The target on two cores: at least 5,000 statuses/s.

The result is printed and written to ``bench/results/status_webhooks-<UTC timestamp>.json``.
The exit status is 1 when a status was lost, repeated or unverified, or the process logged
an error; missing the target alone is not.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import redis
import redis.asyncio as aredis

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    REPO,
    BenchError,
    add_redis_url,
    clarion_executable,
    cpu_snapshot,
    delete_prefix,
    format_table,
    free_port,
    log_findings,
    log_tail,
    print_problems,
    redis_pid,
    result_head,
    running,
    service_env,
    verdict,
    write_result,
)
from streams.core import codec
from streams.core.events import DeliveryQueued, DeliverySent, NotificationAccepted
from streams.core.ids import new_ids
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel, Priority
from streams.status_webhooks.store import StatusWebhookStore

STATUSES = 50_000
QUICK_STATUSES = 10_000
TARGET = 5_000  # statuses/s on two cores
PER_ENTRY = 64  # notifications per events entry, as ingest writes them
SECRET = "whsec_" + "YmVuY2gtc3RhdHVzLXdlYmhvb2stc2VjcmV0LTMyYg=="
WAIT_S = 300.0
CATALOG_TAIL = """
[status_webhooks]
allow_http_hosts = ["127.0.0.1"]
allow_networks = ["127.0.0.0/8"]
"""


def entries(statuses: int) -> list[bytes]:
    """The events entries: per 64 notifications, their acceptance, then their final status."""
    written: list[bytes] = []
    now = datetime.now(UTC)
    for start in range(0, statuses, PER_ENTRY):
        count = min(PER_ENTRY, statuses - start)
        notifications = new_ids(0, count)
        deliveries = new_ids(0, count)
        accepted: list[Any] = []
        sent: list[Any] = []
        for n, (nid, did) in enumerate(zip(notifications, deliveries, strict=True)):
            producer = "bench" if n % 8 else "other"  # one in eight needs no webhook
            accepted.append(NotificationAccepted(
                at=now, notification_id=nid, producer=producer,
                idempotency_key=f"k-{start + n}", notification_type="order_confirmed",
                priority=Priority.NORMAL, recipient_id=f"user-{start + n}", locale="en",
                expires_at=now, delivery_ids=[did],
            ))  # fmt: skip
            accepted.append(DeliveryQueued(
                at=now, notification_id=nid, delivery_id=did, version=1,
                channel=Channel.EMAIL, priority=Priority.NORMAL,
            ))  # fmt: skip
            sent.append(DeliverySent(
                at=now, notification_id=nid, delivery_id=did, version=3, attempt=1,
                provider="sandbox", provider_message_id=f"m-{did}",
            ))  # fmt: skip
        written += [codec.encode_events(accepted), codec.encode_events(sent)]
    return written


def expected(statuses: int) -> int:
    """The statuses due to ``bench`` (the others are ``other``'s, which has no webhook)."""
    return sum(1 for start in range(0, statuses, PER_ENTRY)
               for n in range(min(PER_ENTRY, statuses - start)) if n % 8)  # fmt: skip


async def prepare(
    redis_url: str, keys: KeySpace, statuses: int, receiver_url: str, max_batch: int = 1
) -> None:
    """Write the events and configure the webhooks."""
    client = aredis.Redis.from_url(redis_url)
    try:
        store = StatusWebhookStore(client, keys)
        await store.put("bench", receiver_url, SECRET, max_batch)
        # A webhook nobody's statuses go to: it must cost nothing.
        await store.put("quiet", receiver_url.replace("/bench", "/quiet"), SECRET)
        stream = keys.shard(0).events
        written = entries(statuses)
        for start in range(0, len(written), 200):
            async with client.pipeline(transaction=False) as pipe:
                for raw in written[start : start + 200]:
                    pipe.xadd(stream, {codec.EVENT_FIELD: raw})
                await pipe.execute()
    finally:
        await client.aclose()


_http = httpx.Client(timeout=5)


def receiver_stats(url: str) -> dict[str, int]:
    reply: dict[str, int] = _http.get(f"{url}/_peer/stats").json()
    return reply


def wait_started(url: str, log_path: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            receiver_stats(url)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise BenchError(f"the receiver did not start:\n{log_tail(log_path)}")


def measure(args: argparse.Namespace, workdir: Path, max_batch: int) -> dict[str, Any]:
    """One run: events written, the process started, every status awaited."""
    prefix = f"bench-hooks-{int(time.time())}-{max_batch}"
    keys = KeySpace(prefix, 1)
    catalog = workdir / "catalog.toml"
    catalog.write_text((REPO / "clarion.toml").read_text() + CATALOG_TAIL)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = service_env(prefix, args.redis_url, free_port(), catalog)
    receiver_log, service_log = workdir / "receiver.log", workdir / "status-webhooks.log"
    client = redis.Redis.from_url(args.redis_url)
    want = expected(args.statuses)
    try:
        receiver_argv = [sys.executable, "-m", "tests.peers.webhook", "--port", str(port),
                         "--secret", SECRET]  # fmt: skip
        with running(receiver_argv, env, receiver_log) as receiver:
            wait_started(base, receiver_log)
            asyncio.run(prepare(args.redis_url, keys, args.statuses, f"{base}/bench", max_batch))
            argv = [str(clarion_executable()), "status-webhooks"]
            server = redis_pid(args.redis_url)
            with running(argv, env, service_log) as service:
                groups = {"status-webhooks": [service.pid], "receiver": [receiver.pid]}
                # Measured from the first status the receiver took: start-up left out.
                first, at_first = wait_for(base, 1, service, service_log)
                before = cpu_snapshot(groups, server, postgres=False)
                last, stats = wait_for(base, want, service, service_log)
                after = cpu_snapshot(groups, server, postgres=False)
        cpu = after.used(before)
    finally:
        delete_prefix(client, prefix)
        client.close()
    measured = stats["accepted"] - at_first["accepted"]
    seconds = max(last - first, 1e-6)
    return {
        "max_batch": max_batch,
        "posts": stats["requests"] - at_first["requests"],
        "statuses_written": args.statuses,
        "statuses_due": want,
        "receiver": stats,
        "statuses_measured": measured,
        "seconds": round(seconds, 3),
        "statuses_per_s": round(measured / seconds),
        "cpu_s": cpu,
        "cpu_us_per_status": {group: round(s * 1e6 / measured, 1) for group, s in cpu.items()},
        "log": log_findings(service_log),
    }


def wait_for(base: str, count: int, service: Any, log_path: Path) -> tuple[float, dict[str, int]]:
    """Poll the receiver until it accepted ``count`` statuses: when, and its figures."""
    deadline = time.monotonic() + WAIT_S
    while True:
        stats = receiver_stats(base)
        if stats["accepted"] >= count:
            return time.monotonic(), stats
        if service.poll() is not None:
            raise BenchError(f"status-webhooks exited:\n{log_tail(log_path)}")
        if time.monotonic() > deadline:
            raise BenchError(f"only {stats['accepted']} of {count} statuses in {WAIT_S} s")
        time.sleep(0.02 if count == 1 else 0.1)


def problems_of(run: dict[str, Any]) -> list[str]:
    stats, name = run["receiver"], f"max_batch {run['max_batch']}"
    found = []
    if stats["accepted"] != run["statuses_due"]:
        found.append(f"{name}: {stats['accepted']} statuses accepted, {run['statuses_due']} due")
    if stats["duplicates"]:
        found.append(f"{name}: {stats['duplicates']} statuses repeated")
    if stats["unverified"]:
        found.append(f"{name}: {stats['unverified']} requests failed signature verification")
    if run["log"]["errors"]:
        found.append(f"{name}: status-webhooks logged errors: {run['log']['first_error']}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--statuses", type=int, default=STATUSES)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STATUSES} statuses")
    parser.add_argument(
        "--max-batch", type=int, action="append", dest="batches",
        help="statuses per POST, one run each (default: 1, then 100)",
    )  # fmt: skip
    add_redis_url(parser, "the run")
    args = parser.parse_args()
    if args.quick:
        args.statuses = QUICK_STATUSES
    started = datetime.now(UTC)
    client = redis.Redis.from_url(args.redis_url)
    head = result_head("status_webhooks", started, client)
    client.close()
    runs = []
    for max_batch in args.batches or [1, 100]:
        with tempfile.TemporaryDirectory() as workdir:
            runs.append(measure(args, Path(workdir), max_batch))
    problems = [problem for run in runs for problem in problems_of(run)]
    rows = [
        [
            f"max_batch {run['max_batch']}", f"{run['statuses_measured']:,}",
            f"{run['posts']:,}", f"{run['statuses_per_s']:,}", f"{TARGET:,}",
            verdict(run["statuses_per_s"] >= TARGET),
            " ".join(f"{g} {us}" for g, us in run["cpu_us_per_status"].items()),
        ]
        for run in runs
    ]  # fmt: skip
    header = ["run", "statuses", "POSTs", "per s", "target", "", "CPU µs per status"]
    print(format_table(header, rows))
    print_problems(problems)
    result = {**head, "target_per_s": TARGET, "runs": runs, "problems": problems}
    write_result("status_webhooks", result, started)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
