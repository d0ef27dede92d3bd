"""The FCM adapter alone: client CPU per send and sends/s against the local FCM peer.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/fcm_client.py                    # 20,000 sends at 8 and 128 in flight
    .venv/bin/python bench/fcm_client.py --source ../old    # another checkout's adapter

The peer runs in a process of its own: ``tests.peers.fcm_standalone`` (HTTP/2 over TLS,
served by granian), or for a checkout from before FCM moved to HTTP/2 (one without that
module) its HTTP/1.1 peer on uvicorn (``tests.peers.fcm --account-file``), each from the
measured checkout. The adapter (``app.providers.fcm.FcmProvider``) runs in this process on
uvloop, as a delivery worker runs it, with the catalog's defaults (one connection for HTTP/2)
and ``max_in_flight`` = ``in_flight`` (the size of the HTTP/1.1 client's pool): ``in_flight``
tasks each send one message after the other, which keeps that many sends in flight. After
1,000 sends that are not counted (the access token is made there), ``--sends`` more are
measured:

- client µs per send: this process's CPU time (``time.process_time``) over the sends: the
  payload, the JSON, the transport, TLS, the event loop; not the message's rendering, which
  is the worker's either way;
- peer µs per request: the peer process's CPU time (``/proc``) over the requests;
- sends/s: wall time, with the client and the peer on the same cores.

The code measured is this checkout's or ``--source``'s (as in ``bench/instructions.py``:
Clarion's modules and the peer come from that checkout, the benchmark's own code from this
one). The result is printed and written to ``bench/results/fcm_client-<UTC timestamp>.json``.
"""

from __future__ import annotations

import argparse
import gc
import os
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

import msgspec
import redis

from bench.harness import (
    REPO,
    format_table,
    free_port,
    git_output,
    measure_source,
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


def peer_process(source: Path, port: int, directory: Path) -> tuple[list[str], str, str]:
    """The peer's command line in ``source``, the base URL and the CA file to reach it."""
    if (source / "tests" / "peers" / "fcm_standalone.py").exists():
        argv = ["-m", "tests.peers.fcm_standalone", "--port", str(port),
                "--cert-dir", str(directory)]  # fmt: skip
        return argv, f"https://127.0.0.1:{port}", str(directory / "ca.pem")
    argv = ["-m", "tests.peers.fcm", "--port", str(port),
            "--account-file", str(directory / "account.json")]  # fmt: skip
    return argv, f"http://127.0.0.1:{port}", ""


def messages(count: int) -> list[Any]:
    from app.providers.base import Message, PushContent  # noqa: PLC0415
    from streams.core.vocabulary import Priority  # noqa: PLC0415

    expires = int(time.time() * 1000) + 3_600_000
    push = PushContent(data={"order": "A-17"}, link="https://shop.example/orders/A-17")
    return [
        Message(
            delivery_id=f"0192f0c4-0000-7000-8000-{n:012d}",
            idempotency_key=f"k{n}",
            channel="PUSH",
            address=f"fcm bench-{n % 10_000}:APA91b",
            title="Order A-17 shipped",
            body="It is on its way.",
            attempt=1,
            priority=Priority.NORMAL,
            expires_ms=expires,
            push=push,
        )
        for n in range(count)
    ]


async def measure(
    base_url: str, ca_file: str, account: str, peer_pid: int, sends: int, in_flight: int
) -> dict[str, Any]:
    from app.catalog.push import FcmConfig  # noqa: PLC0415
    from app.providers.fcm import FcmProvider  # noqa: PLC0415

    config = msgspec.convert(
        {"kind": "fcm", "project_id": "clarion-peer", "service_account_env": "BENCH_FCM",
         "base_url": base_url, "ca_file": ca_file, "max_in_flight": in_flight},
        FcmConfig,
    )  # fmt: skip
    provider = FcmProvider("fcm", config, {"service_account_env": account})
    try:
        await send_all(provider.send, messages(WARM_UP), in_flight)
        batch = messages(sends)
        gc.collect()
        cpu, peer_cpu = time.process_time(), process_cpu_seconds(peer_pid)
        wall = time.perf_counter()
        await send_all(provider.send, batch, in_flight)
        wall = time.perf_counter() - wall
        cpu, peer_cpu = time.process_time() - cpu, process_cpu_seconds(peer_pid) - peer_cpu
    finally:
        await provider.close()
    return {
        "in_flight": in_flight,
        "sends": sends,
        "sends_per_s": round(sends / wall, 1),
        "client_us_per_send": round(cpu / sends * 1e6, 1),
        "peer_us_per_request": round(peer_cpu / sends * 1e6, 1),
        "token_requests": provider.token_requests,
    }


def run(args: argparse.Namespace, source: Path) -> list[dict[str, Any]]:
    import uvloop  # noqa: PLC0415

    runs = []
    with tempfile.TemporaryDirectory(prefix="clarion-fcm-client-") as scratch:
        directory, port = Path(scratch), free_port()
        argv, base_url, ca_file = peer_process(source, port, directory)
        log_path = directory / "peer.log"
        with running([sys.executable, *argv], None, log_path, cwd=source) as peer:
            wait_listening(peer, port, log_path)
            account = (directory / "account.json").read_text()
            for in_flight in args.in_flight:
                figures = uvloop.run(
                    measure(base_url, ca_file, account, peer.pid, args.sends, in_flight)
                )
                print(
                    f"  {in_flight:>4} in flight: {figures['sends_per_s']:,.0f} sends/s, "
                    f"client {figures['client_us_per_send']} µs/send, "
                    f"peer {figures['peer_us_per_request']} µs/request",
                    flush=True,
                )
                runs.append({"transport": "http2" if ca_file else "http1", **figures})
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
    print(f"FCM adapter alone, code of {source}:", flush=True)
    runs = run(args, source)
    client = redis.Redis()
    result = {
        **result_head("fcm_client", started, client),
        "source": "this checkout" if source == REPO else "another checkout (--source)",
        "source_commit": git_output("-C", str(source), "rev-parse", "--short", "HEAD") or "",
        "load_average": os.getloadavg(),
        "runs": runs,
    }
    client.close()
    rows = [
        [r["transport"], str(r["in_flight"]), f"{r['sends_per_s']:,.0f}",
         f"{r['client_us_per_send']}", f"{r['peer_us_per_request']}"]
        for r in runs
    ]  # fmt: skip
    header = ["transport", "in flight", "sends/s", "client µs/send", "peer µs/request"]
    print("\n" + format_table(header, rows))
    write_result("fcm_client", result, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
