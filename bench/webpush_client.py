"""The Web Push adapter alone: client CPU per send and sends/s against the local push service.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/webpush_client.py                  # 20,000 sends at 8 and 128 in flight
    .venv/bin/python bench/webpush_client.py --source ../old  # another checkout's adapter

The twin of ``bench/fcm_client.py``. The push service runs in a process of its own:
``tests.peers.webpush_standalone`` (HTTP/2 over TLS, served by granian), or for a checkout
from before Web Push moved to HTTP/2 (one without that module) its HTTP/1.1 service on
uvicorn (``tests.peers.webpush --port``), each from the measured checkout; either decrypts
every message, as the browser would. The adapter (``app.providers.webpush.WebPushProvider``)
runs in this process on uvloop, as a delivery worker runs it, with ``max_in_flight`` =
``in_flight`` (the size of the HTTP/1.1 client's pool): ``in_flight`` tasks each send one
message after the other, to 1,000 subscriptions of the one push service. After 1,000 sends
that are not counted (the VAPID JWT is signed there), ``--sends`` more are measured:

- client µs per send: this process's CPU time (``time.process_time``) over the sends: the
  subscription's keys, the JSON, the encryption, the headers, the transport, TLS, the event
  loop; not the message's rendering, which is the worker's either way;
- of which making the message: the same messages' keys, JSON and encryption alone, without
  sending (``subscription``, ``payload``, ``encrypt``), measured after the sends; the rest is
  the transport's;
- peer µs per request: the push service's CPU time (``/proc``) over the requests, its own
  decryption included;
- sends/s: wall time, with the client and the peer on the same cores.

Every measured send must have been taken (the service's ``/_peer/stats``). The code measured
is this checkout's or ``--source``'s (Clarion's modules and the peer come from that checkout,
the benchmark's own code from this one). The result is printed and written to
``bench/results/webpush_client-<UTC timestamp>.json``.
"""

from __future__ import annotations

import argparse
import gc
import os
import ssl
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    # Measuring another checkout: Clarion's modules from there, ``bench`` (imported here
    # first) from this one.
    import bench  # noqa: F401

    if os.environ.get("CLARION_BENCH_SOURCE"):  # harness.SOURCE_VARIABLE
        sys.path.insert(0, os.environ["CLARION_BENCH_SOURCE"])

import httpx
import msgspec
import redis

from bench.harness import (
    REPO,
    BenchError,
    format_table,
    free_port,
    git_output,
    measure_source,
    print_problems,
    process_cpu_seconds,
    result_head,
    running,
    send_all,
    wait_listening,
    write_result,
)

SENDS = 20_000
WARM_UP = 1_000
IN_FLIGHT = (8, 128)
SUBSCRIPTIONS = 1_000
# A VAPID private key (32 bytes, base64url): the benchmark's own, nothing real.
VAPID_KEY = "Y2xhcmlvbi1iZW5jaC12YXBpZC1rZXktMzItYnl0ZXM"


class Peer(msgspec.Struct):
    """The push service as the adapter reaches it."""

    argv: list[str]
    origin: str
    ca_file: str  # "": plain http (the HTTP/1.1 service)


def peer_process(source: Path, port: int, directory: Path) -> Peer:
    """The push service's command line in ``source`` and how to reach it."""
    if (source / "tests" / "peers" / "webpush_standalone.py").exists():
        argv = ["-m", "tests.peers.webpush_standalone", "--port", str(port),
                "--cert-dir", str(directory)]  # fmt: skip
        return Peer(argv, f"https://127.0.0.1:{port}", str(directory / "ca.pem"))
    return Peer(["-m", "tests.peers.webpush", "--port", str(port)], f"http://127.0.0.1:{port}", "")


def messages(count: int, origin: str) -> list[Any]:
    from app.providers.base import Message, PushContent  # noqa: PLC0415
    from streams.core.vocabulary import Priority  # noqa: PLC0415
    from tests.peers.webpush import subscription  # noqa: PLC0415

    addresses = [subscription(n + 1, origin).address for n in range(SUBSCRIPTIONS)]
    expires = int(time.time() * 1000) + 3_600_000
    push = PushContent(data={"order": "A-17"}, link="https://shop.example/orders/A-17")
    return [
        Message(
            delivery_id=f"0192f0c4-0000-7000-8000-{n:012d}",
            idempotency_key=f"k{n}",
            channel="PUSH",
            address=addresses[n % SUBSCRIPTIONS],
            title="Order A-17 shipped",
            body="It is on its way.",
            attempt=1,
            priority=Priority.NORMAL,
            expires_ms=expires,
            push=push,
        )
        for n in range(count)
    ]


def making_seconds(batch: list[Any]) -> float:
    """CPU seconds to make ``batch``'s bodies without sending them (keys, JSON, encryption)."""
    from app.providers.webpush import encrypt, payload, subscription  # noqa: PLC0415

    cpu = time.process_time()
    for message in batch:
        to = subscription(message.address)
        encrypt(payload(message), to.public_key, to.auth, point=to.point)
    return time.process_time() - cpu


def provider_for(peer: Peer, in_flight: int) -> Any:
    from app.catalog.push import WebPushConfig  # noqa: PLC0415
    from app.providers.webpush import WebPushProvider  # noqa: PLC0415

    settings: dict[str, Any] = {
        "kind": "webpush", "vapid_private_key_env": "BENCH_VAPID_KEY",
        "subject": "mailto:bench@clarion.test", "allow_networks": ["127.0.0.0/8"],
        "max_in_flight": in_flight,
    }  # fmt: skip
    if peer.ca_file:
        settings["ca_file"] = peer.ca_file
    else:
        settings["allow_http_hosts"] = ["127.0.0.1"]
    config = msgspec.convert(settings, WebPushConfig)
    return WebPushProvider("webpush", config, {"vapid_private_key_env": VAPID_KEY})


async def measure(peer: Peer, peer_pid: int, sends: int, in_flight: int) -> dict[str, Any]:
    provider = provider_for(peer, in_flight)
    try:
        await send_all(provider.send, messages(WARM_UP, peer.origin), in_flight)
        batch = messages(sends, peer.origin)
        gc.collect()
        cpu, peer_cpu = time.process_time(), process_cpu_seconds(peer_pid)
        wall = time.perf_counter()
        await send_all(provider.send, batch, in_flight)
        wall = time.perf_counter() - wall
        cpu, peer_cpu = time.process_time() - cpu, process_cpu_seconds(peer_pid) - peer_cpu
    finally:
        await provider.close()
    making = making_seconds(batch)
    return {
        "in_flight": in_flight,
        "sends": sends,
        "sends_per_s": round(sends / wall, 1),
        "client_us_per_send": round(cpu / sends * 1e6, 1),
        "making_us_per_send": round(making / sends * 1e6, 1),
        "transport_us_per_send": round((cpu - making) / sends * 1e6, 1),
        "peer_us_per_request": round(peer_cpu / sends * 1e6, 1),
    }


def peer_accepted(peer: Peer) -> int:
    """How many messages the push service took (decrypted) so far."""
    url = peer.origin + "/_peer/stats"
    if peer.ca_file:
        verify = ssl.create_default_context(cafile=peer.ca_file)
        with httpx.Client(http2=True, verify=verify, timeout=5) as client:
            stats = client.get(url).json()
    else:
        stats = httpx.get(url, timeout=5).json()
    return int(stats["accepted"])


def run(args: argparse.Namespace, source: Path) -> list[dict[str, Any]]:
    import uvloop  # noqa: PLC0415

    runs = []
    with tempfile.TemporaryDirectory(prefix="clarion-webpush-client-") as scratch:
        directory, port = Path(scratch), free_port()
        peer = peer_process(source, port, directory)
        log_path = directory / "peer.log"
        with running([sys.executable, *peer.argv], None, log_path, cwd=source) as process:
            wait_listening(process, port, log_path)
            expected = 0
            for in_flight in args.in_flight:
                figures = uvloop.run(measure(peer, process.pid, args.sends, in_flight))
                expected += WARM_UP + args.sends
                if peer_accepted(peer) != expected:
                    raise BenchError(f"the push service took {peer_accepted(peer)} of {expected}")
                print(
                    f"  {in_flight:>4} in flight: {figures['sends_per_s']:,.0f} sends/s, "
                    f"client {figures['client_us_per_send']} µs/send "
                    f"({figures['making_us_per_send']} making the message), "
                    f"peer {figures['peer_us_per_request']} µs/request",
                    flush=True,
                )
                runs.append({"transport": "http2" if peer.ca_file else "http1", **figures})
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sends", type=int, default=SENDS)
    parser.add_argument("--in-flight", type=int, action="append", help="default: 8 and 128")
    parser.add_argument(
        "--source", type=Path, default=REPO, help="the checkout measured (default: this one)"
    )
    args = parser.parse_args()
    args.in_flight = args.in_flight or list(IN_FLIGHT)
    source = args.source.resolve()
    measure_source(source, __file__)
    started = datetime.now(UTC)
    print(f"Web Push adapter alone, code of {source}:", flush=True)
    try:
        runs = run(args, source)
    except BenchError as error:
        print_problems([str(error)])
        return 1
    client = redis.Redis()
    result = {
        **result_head("webpush_client", started, client),
        "source": "this checkout" if source == REPO else "another checkout (--source)",
        "source_commit": git_output("-C", str(source), "rev-parse", "--short", "HEAD") or "",
        "load_average": os.getloadavg(),
        "runs": runs,
    }
    client.close()
    rows = [
        [r["transport"], str(r["in_flight"]), f"{r['sends_per_s']:,.0f}",
         f"{r['client_us_per_send']}", f"{r['making_us_per_send']}",
         f"{r['transport_us_per_send']}", f"{r['peer_us_per_request']}"]
        for r in runs
    ]  # fmt: skip
    header = ["transport", "in flight", "sends/s", "client µs/send", "of which making",
              "transport µs", "peer µs/request"]  # fmt: skip
    print("\n" + format_table(header, rows))
    write_result("webpush_client", result, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
