"""Provider benchmark: end to end through each real adapter against its local peer, beside
the sandbox, in one run on the same machine.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/providers.py                 # every adapter, 20,000 deliveries each
    .venv/bin/python bench/providers.py --quick         # 4,000 each
    .venv/bin/python bench/providers.py --only smtp     # one adapter (and the sandbox)

For each adapter it starts the adapter's local peer as a process of its own (the SMTP relay
of ``tests/peers/smtp.py``, the SendGrid and Twilio APIs of ``tests/peers/``, the webhook
receiver that verifies every signature, and, served over HTTP/2 and TLS by granian
(``tests/peers/http2_standalone.py``), the FCM API with its OAuth token endpoint, the APNs
provider API and the Web Push service that decrypts every message), then the API
(``clarion api``) and two delivery workers (``clarion worker --slot N``) under a fresh key
prefix, with a catalog of one provider of that kind reached at the peer's port and one
NORMAL type with one delivery on its channel (EMAIL, SMS, WEBHOOK, or PUSH with one target of
the adapter's platform). The sandbox runs the same type on EMAIL.

Notifications are batch-ingested (1000 per request) while the workers deliver, as in
``bench/pipeline.py``. Deliveries/s run from the first accepted notification (the ms in its
id) to the last ``DeliverySent`` event (the ms of its events entry). Every queued delivery
must be SENT exactly once in the events; where the peer counts what it took
(``/_peer/stats``), that count must be the number of deliveries. The CPU each process group
used meanwhile (the API, the workers, the peer, Redis, this load generator; read from
``/proc``) is given per delivery: it depends less on what else the machine runs than
deliveries/s do. Targets on two cores: the
HTTP adapters at least 3,000 deliveries/s, SMTP at least 800 messages/s, FCM and APNs (one
multiplexed HTTP/2 connection per worker) 3,000, Web Push (encryption included, one HTTP/2
connection per worker to the one push service) 1,500.

The result is printed and written to ``bench/results/providers-<UTC timestamp>.json``; a run
of some adapters (``--only``) to ``providers-<adapters>-<UTC timestamp>.json`` (such as
``providers-fcm-…``), so it replaces the last run of the same adapters, never the last full
run.
The exit status is 1 when a delivery was lost or duplicated or a service logged an error;
missing a target alone is not.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import secrets
import ssl
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
import redis
import redis.asyncio as aredis

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    BATCH_SIZE,
    HEALTH_PATH,
    REPO,
    SCAN_CHUNK,
    BenchError,
    add_redis_url,
    api_client,
    batch_pieces,
    clarion_executable,
    cpu_snapshot,
    delete_prefix,
    entry_ms,
    format_table,
    free_port,
    log_findings,
    log_tail,
    post_batches,
    print_problems,
    redis_pid,
    result_head,
    running,
    service_env,
    verdict,
    wait_consumers,
    wait_healthy,
    wait_listening,
    write_result,
)
from streams.core import codec
from streams.core.keys import KeySpace

WORKERS = 2
API_WORKERS = 1
CONCURRENCY = 2  # batch requests in flight
DELIVERIES = 20_000
QUICK_DELIVERIES = 4_000
IN_FLIGHT = 128  # each provider's bulkhead per worker process
TARGETS = {
    "smtp": 800, "sendgrid": 3000, "twilio": 3000, "webhook": 3000,
    "fcm": 3000, "apns": 3000, "webpush": 1500,
}  # fmt: skip

# The secrets of the peers (what the peers expect; nothing real).
SMTP_PASSWORD = "peer-smtp-password"
SENDGRID_KEY = "SG.peer-test-key.0123456789abcdef"
TWILIO_SID = "AC" + "5ee1" * 8
TWILIO_TOKEN = "peer-auth-token-0123456789abcdef"
WEBHOOK_SECRET = "whsec_" + "YmVuY2gtd2ViaG9vay1zZWNyZXQtMzItYnl0ZXMh"
# A VAPID private key (32 bytes, base64url): the bench's own, made for it, nothing real.
VAPID_KEY = "Y2xhcmlvbi1iZW5jaC12YXBpZC1rZXktMzItYnl0ZXM"

TYPE = """
[types.bench]
channels = ["{channel}"]
priority = "NORMAL"
ttl_seconds = 3600
opt_out = false

[types.bench.templates.en]
{channel} = {template}
"""
TEMPLATES = {
    "EMAIL": '{ title = "Order {{ order }} shipped", body = "Your order {{ order }} is on its '
    'way.", html = "<p>Your order <b>{{ order }}</b> is on its way.</p>" }',
    "SMS": '{ body = "Your order {{ order }} is on its way." }',
    "WEBHOOK": '{ body = "{\\"event\\": \\"shipped\\", \\"order\\": {{ order|tojson }}}" }',
    "PUSH": '{ title = "Order {{ order }} shipped", body = "It is on its way.", '
    'link = "https://shop.example/orders/{{ order }}", data = { order = "{{ order }}" } }',
}


@dataclass(frozen=True)
class Adapter:
    """One provider kind as the benchmark runs it."""

    name: str
    channel: str
    recipient: str  # the recipient's JSON fields, with {i} for the item number
    peer: tuple[str, ...] = ()  # the peer's module (run with --port), if any
    stats: bool = False  # the peer answers GET /_peer/stats on its port
    env: dict[str, str] = field(default_factory=dict)
    # The recipient's JSON fields for item i and the peer's port, where a format string of
    # ``recipient`` cannot make them (Web Push subscriptions).
    recipient_of: Callable[[int, int], str] | None = None
    # Secrets the peer makes when it starts, read from its directory ("{dir}" in ``peer``).
    env_from_peer: Callable[[Path], dict[str, str]] | None = None

    def provider(self, port: int) -> str:
        common = f"max_in_flight = {IN_FLIGHT}\ntimeout_seconds = 10\n"
        if self.name == "sandbox":
            return f'kind = "sandbox"\n{common}'
        if self.name == "smtp":
            return (
                f'kind = "smtp"\nhost = "127.0.0.1"\nport = {port}\ntls = "none"\n'
                'from = "Clarion <no-reply@clarion.test>"\nusername = "clarion"\n'
                f'password_env = "BENCH_SMTP_PASSWORD"\npool_size = 16\n{common}'
            )
        if self.name == "sendgrid":
            return (
                f'kind = "sendgrid"\nbase_url = "http://127.0.0.1:{port}"\n'
                f'api_key_env = "BENCH_SENDGRID_KEY"\nfrom = "no-reply@clarion.test"\n{common}'
            )
        if self.name == "twilio":
            return (
                f'kind = "twilio"\nbase_url = "http://127.0.0.1:{port}"\n'
                f'account_sid = "{TWILIO_SID}"\nauth_token_env = "BENCH_TWILIO_TOKEN"\n'
                f'from = "+15005550006"\n{common}'
            )
        if self.name == "fcm":
            return (
                f'kind = "fcm"\nproject_id = "clarion-peer"\n'
                f'service_account_env = "BENCH_FCM_ACCOUNT"\n'
                f'base_url = "https://127.0.0.1:{port}"\nca_file = "{{dir}}/ca.pem"\n{common}'
            )
        if self.name == "apns":
            return (
                f'kind = "apns"\nteam_id = "PEERTEAM01"\nkey_id = "PEERKEY001"\n'
                f'key_env = "BENCH_APNS_KEY"\ntopic = "com.example.clarion"\n'
                f'base_url = "https://127.0.0.1:{port}"\nca_file = "{{dir}}/ca.pem"\n{common}'
            )
        if self.name == "webpush":
            return (
                f'kind = "webpush"\nvapid_private_key_env = "BENCH_VAPID_KEY"\n'
                'subject = "mailto:bench@clarion.test"\nca_file = "{dir}/ca.pem"\n'
                f'allow_networks = ["127.0.0.0/8"]\n{common}'
            )
        return (
            f'kind = "webhook"\nsecret_env = "BENCH_WEBHOOK_SECRET"\n'
            f'allow_http_hosts = ["127.0.0.1"]\nallow_networks = ["127.0.0.0/8"]\n{common}'
        )

    def catalog(self, port: int, peer_dir: Path) -> str:
        return self._catalog(port).replace("{dir}", str(peer_dir))

    def _catalog(self, port: int) -> str:
        return (
            f"[providers.{self.name}]\n{self.provider(port)}\n"
            f'[channels.{self.channel}]\nprovider = "{self.name}"\n'
            "retry = { base_seconds = 1, max_seconds = 5, max_attempts = 6 }\n"
            + TYPE.format(channel=self.channel, template=TEMPLATES[self.channel])
        )


@functools.cache
def web_push_recipient(number: int, port: int) -> str:
    """Subscription ``number`` of the local push service, as a recipient's push target."""
    from tests.peers.webpush import subscription  # noqa: PLC0415 (needs the repository)

    sub = subscription(number + 1, f"https://127.0.0.1:{port}")
    target = {"platform": "webpush", "endpoint": sub.endpoint, "expirationTime": None,
              "keys": {"p256dh": sub.p256dh, "auth": sub.auth}}  # fmt: skip
    return '"push_targets": ' + msgspec.json.encode([target]).decode()


ADAPTERS = {
    "sandbox": Adapter("sandbox", "EMAIL", '"email": "user-{i}@example.com"'),
    "smtp": Adapter(
        "smtp",
        "EMAIL",
        '"email": "user-{i}@example.com"',
        ("tests.peers.smtp", "--password", SMTP_PASSWORD),
        env={"BENCH_SMTP_PASSWORD": SMTP_PASSWORD},
    ),
    "sendgrid": Adapter(
        "sendgrid",
        "EMAIL",
        '"email": "user-{i}@example.com"',
        ("tests.peers.sendgrid",),
        stats=True,
        env={"BENCH_SENDGRID_KEY": SENDGRID_KEY},
    ),
    "twilio": Adapter(
        "twilio",
        "SMS",
        '"phone": "+1415555{i:04d}"',
        ("tests.peers.twilio",),
        stats=True,
        env={"BENCH_TWILIO_TOKEN": TWILIO_TOKEN},
    ),
    "webhook": Adapter(
        "webhook",
        "WEBHOOK",
        '"webhook_url": "http://127.0.0.1:{port}/hooks/{i}"',
        ("tests.peers.webhook", "--secret", WEBHOOK_SECRET),
        stats=True,
        env={"BENCH_WEBHOOK_SECRET": WEBHOOK_SECRET},
    ),
    "fcm": Adapter(
        "fcm",
        "PUSH",
        '"push_targets": [{{"platform": "fcm", "token": "bench-{i}:APA91b"}}]',
        ("tests.peers.fcm_standalone", "--cert-dir", "{dir}"),
        stats=True,
        env_from_peer=lambda d: {"BENCH_FCM_ACCOUNT": (d / "account.json").read_text()},
    ),
    "apns": Adapter(
        "apns",
        "PUSH",
        '"push_targets": [{{"platform": "apns", "token": "{i:064x}"}}]',
        ("tests.peers.apns_standalone", "--cert-dir", "{dir}"),
        stats=True,
        env_from_peer=lambda d: {"BENCH_APNS_KEY": (d / "key.p8").read_text()},
    ),
    "webpush": Adapter(
        "webpush",
        "PUSH",
        "",
        ("tests.peers.webpush_standalone", "--cert-dir", "{dir}"),
        stats=True,
        env={"BENCH_VAPID_KEY": VAPID_KEY},
        recipient_of=web_push_recipient,
    ),
}


def item_of(adapter: Adapter, port: int) -> Any:
    def item(i: int) -> bytes:
        if adapter.recipient_of is not None:
            recipient = adapter.recipient_of(i % 10_000, port)
        else:
            recipient = adapter.recipient.format(i=i % 10_000, port=port)
        return (
            f'-{i}", "recipient": {{"id": "u-{i}", {recipient}}}, "type": "bench", '
            f'"data": {{"order": "A-{i}"}}}}'
        ).encode()

    return item


class _Tagged(msgspec.Struct):
    type: str
    delivery_id: str = ""


_events = msgspec.json.Decoder(list[_Tagged])


async def sent_events(client: aredis.Redis, stream: str) -> tuple[Counter[str], int, Counter[str]]:
    """Each delivery's DeliverySent events, the ms of the last one, every event type's count."""
    sent: Counter[str] = Counter()
    types: Counter[str] = Counter()
    last_ms, start = 0, "-"
    name = codec.EVENT_FIELD.encode()
    while True:
        chunk: Any = await client.xrange(stream, start, "+", count=SCAN_CHUNK)
        for entry_id, fields in chunk:
            for event in _events.decode(fields.get(name, b"[]")):
                types[event.type] += 1
                if event.type == "DeliverySent":
                    sent[event.delivery_id] += 1
                    last_ms = max(last_ms, entry_ms(entry_id))
        if len(chunk) < SCAN_CHUNK:
            return sent, last_ms, types
        last = chunk[-1][0]
        start = f"({last.decode() if isinstance(last, bytes) else last}"


async def measure(
    adapter: Adapter, base_url: str, redis_url: str, keys: KeySpace, count: int, peer_port: int
) -> tuple[dict[str, Any], list[str]]:
    client = aredis.Redis.from_url(redis_url)
    problems: list[str] = []
    stream = keys.shard(0).events
    try:
        async with api_client(base_url, CONCURRENCY, keepalive=False) as api:
            ingested = await post_all(api, adapter, count, peer_port, keys.prefix)
        if ingested.first_problem:
            problems.append(f"{adapter.name}: {ingested.first_problem}")
        queued = set(ingested.queued)
        deadline = time.monotonic() + max(60.0, count / 200)
        while True:
            sent, last_ms, types = await sent_events(client, stream)
            if queued <= set(sent) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    finally:
        await client.aclose()
    lost = len(queued - set(sent))
    doubled = sum(1 for n in sent.values() if n > 1)
    if lost or doubled:
        problems.append(f"{adapter.name}: {lost} deliveries not sent, {doubled} sent twice")
    seconds = max(0.001, (last_ms - (ingested.first_accept_ms or last_ms)) / 1000)
    figures = {
        "deliveries_queued": len(queued),
        "deliveries_sent": len(sent),
        "lost": lost,
        "sent_twice": doubled,
        "deliveries_per_s": round(len(sent) / seconds, 1),
        "seconds": round(seconds, 3),
        "ingest": ingested.summary(),
        "events_by_type": dict(types.most_common()),
    }
    return figures, problems


async def post_all(
    api: httpx.AsyncClient, adapter: Adapter, count: int, peer_port: int, tag: str
) -> Any:
    pieces = batch_pieces(BATCH_SIZE, item_of(adapter, peer_port))
    return await post_batches(api, pieces, count // BATCH_SIZE, tag, CONCURRENCY)


def peer_stats(adapter: Adapter, port: int, peer_dir: Path) -> dict[str, Any] | None:
    if not adapter.stats:
        return None
    if adapter.name in {"fcm", "apns", "webpush"}:  # HTTP/2 over TLS, the peer's certificate
        ca = ssl.create_default_context(cafile=str(peer_dir / "ca.pem"))
        with httpx.Client(http2=True, verify=ca, timeout=5) as h2:
            answer = h2.get(f"https://127.0.0.1:{port}/_peer/stats")
    else:
        answer = httpx.get(f"http://127.0.0.1:{port}/_peer/stats", timeout=5)
    stats: dict[str, Any] = answer.json()
    return stats


def run_adapter(
    adapter: Adapter, args: argparse.Namespace, base_prefix: str, logs: Path
) -> dict[str, Any]:
    """Start the peer, the API and the workers for ``adapter``; measure; stop them."""
    prefix = f"{base_prefix}-{adapter.name}"
    keys = KeySpace(prefix)
    port, peer_port = free_port(), free_port()
    catalog = logs / f"{adapter.name}.toml"
    peer_dir = logs / f"peer-{adapter.name}"
    peer_dir.mkdir(exist_ok=True)
    catalog.write_text(adapter.catalog(peer_port, peer_dir))
    env = service_env(prefix, args.redis_url, port, catalog) | adapter.env
    clarion = str(clarion_executable())
    peer_log, api_log = logs / f"peer-{adapter.name}.log", logs / f"api-{adapter.name}.log"
    worker_logs = [logs / f"worker-{adapter.name}-{slot}.log" for slot in range(WORKERS)]
    client = redis.Redis.from_url(args.redis_url)
    result: dict[str, Any] = {"adapter": adapter.name, "channel": adapter.channel}
    problems: list[str] = []
    print(f"{adapter.name} ({adapter.channel}): {args.deliveries:,} deliveries ...", flush=True)
    try:
        with ExitStack() as stack:
            if adapter.peer:
                argv = [sys.executable, "-m", adapter.peer[0], "--port", str(peer_port)]
                options = [option.replace("{dir}", str(peer_dir)) for option in adapter.peer[1:]]
                peer = stack.enter_context(running(argv + options, env, peer_log))
                wait_listening(peer, peer_port, peer_log)
                if adapter.env_from_peer is not None:
                    env |= adapter.env_from_peer(peer_dir)
            api = stack.enter_context(
                running([clarion, "api", "--workers", str(API_WORKERS)], env, api_log)
            )
            procs = [
                stack.enter_context(
                    running([clarion, "worker", "--slot", str(slot)], env, worker_logs[slot])
                )
                for slot in range(WORKERS)
            ]
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(api, base_url + HEALTH_PATH, api_log)
            wait_consumers(client, keys, procs, worker_logs)
            services = {"api": [api.pid], "workers": [proc.pid for proc in procs]}
            if adapter.peer:
                services["peer"] = [peer.pid]
            redis_server = redis_pid(args.redis_url)
            before = cpu_snapshot(services, redis_server, postgres=False)
            figures, problems = asyncio.run(
                measure(adapter, base_url, args.redis_url, keys, args.deliveries, peer_port)
            )
            used = cpu_snapshot(services, redis_server, postgres=False).used(before)
            figures["cpu_us_per_delivery"] = {
                group: round(seconds / max(1, figures["deliveries_sent"]) * 1e6, 1)
                for group, seconds in used.items()
            }
            result |= figures
            stats = peer_stats(adapter, peer_port, peer_dir)
            if stats is not None:
                result["peer"] = stats
                if stats.get("accepted") != figures["deliveries_queued"]:
                    problems.append(
                        f"{adapter.name}: the peer took {stats.get('accepted')} messages, "
                        f"{figures['deliveries_queued']} were queued"
                    )
    finally:
        delete_prefix(client, prefix)
        client.close()
    if adapter.name == "smtp":  # the relay says how many it took when it stops
        last = log_tail(peer_log, 1).strip()
        result["peer"] = {
            "accepted": int(last.split()[-1]) if last.startswith("accepted") else None
        }
        if result["peer"]["accepted"] != result.get("deliveries_queued"):
            problems.append(
                f"smtp: the relay took {last!r}, {result.get('deliveries_queued')} queued"
            )
    findings = {path.stem: log_findings(path) for path in [api_log, *worker_logs]}
    result["logs"] = findings
    problems += [
        f"{name}: {f['errors']} error lines" for name, f in findings.items() if f["errors"]
    ]
    result["problems"] = problems
    target = TARGETS.get(adapter.name)
    result["target_deliveries_per_s"] = target
    result["meets_target"] = None if target is None else result["deliveries_per_s"] >= target
    cpu = ", ".join(f"{k} {v:,.0f}" for k, v in result.get("cpu_us_per_delivery", {}).items())
    print(f"  {result['deliveries_per_s']:,.0f} deliveries/s; CPU µs a delivery: {cpu}", flush=True)
    return result


def print_report(result: dict[str, Any]) -> None:
    print(
        f"\nClarion provider benchmark: {WORKERS} delivery workers, API with {API_WORKERS} "
        f"uvicorn worker, {os.cpu_count()} cores; each adapter against its local peer\n"
    )
    rows = []
    for run in result["runs"]:
        target = run.get("target_deliveries_per_s")
        rows.append(
            [
                run["adapter"],
                run["channel"],
                f"{run['deliveries_sent']:,} of {run['deliveries_queued']:,}",
                f"{run['deliveries_per_s']:,.0f}",
                f">= {target:,}" if target else "",
                verdict(run["meets_target"]) if target else "",
            ]
        )
    header = ["adapter", "channel", "sent", "deliveries/s", "target", "verdict"]
    print(format_table(header, rows))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--deliveries", type=int, default=DELIVERIES, help="per adapter")
    parser.add_argument("--quick", action="store_true", help=f"--deliveries {QUICK_DELIVERIES}")
    parser.add_argument("--only", choices=sorted(set(ADAPTERS) - {"sandbox"}), action="append")
    add_redis_url(parser, "the services")
    args = parser.parse_args()
    if args.quick:
        args.deliveries = QUICK_DELIVERIES
    args.deliveries = max(BATCH_SIZE, args.deliveries // BATCH_SIZE * BATCH_SIZE)
    return args


def main() -> int:
    args = parse_args()
    started = datetime.now(UTC)
    base_prefix = f"bench-{secrets.token_hex(6)}"
    names = ["sandbox", *(args.only or [n for n in ADAPTERS if n != "sandbox"])]
    client = redis.Redis.from_url(args.redis_url)
    result: dict[str, Any] = {
        **result_head("providers", started, client),
        "parameters": {
            "deliveries_per_adapter": args.deliveries,
            "delivery_workers": WORKERS,
            "api_workers": API_WORKERS,
            "max_in_flight": IN_FLIGHT,
            "batch_size": BATCH_SIZE,
            "concurrency": CONCURRENCY,
        },
        "targets": TARGETS,
        "runs": [],
        "problems": [],
    }
    client.close()
    with tempfile.TemporaryDirectory(prefix="clarion-bench-") as scratch:
        for name in names:
            try:
                run = run_adapter(ADAPTERS[name], args, base_prefix, Path(scratch))
            except BenchError as error:
                result["problems"].append(f"{name}: {error}")
                continue
            result["runs"].append(run)
            result["problems"] += run["problems"]
    print_report(result)
    write_result("-".join(["providers", *sorted(set(args.only or []))]), result, started)
    if result["problems"]:
        print_problems(result["problems"])
        return 1
    return 0


if __name__ == "__main__":
    if not (REPO / "tests" / "peers").is_dir():
        raise SystemExit("tests/peers is missing: run this from a checkout of the repository")
    sys.exit(main())
