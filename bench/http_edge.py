"""Instructions per request of the API server's HTTP protocol: uvicorn's httptools protocol
against ``app.processes.http_edge.EdgeProtocol``, counted by valgrind's callgrind.

Run with the project's virtualenv (valgrind must be installed)::

    .venv/bin/python bench/http_edge.py

Requests per second measured on a shared two-core machine swing too much to show a cost of
a microsecond per request; instructions do not. Each protocol serves, in a process of its
own under callgrind, a few thousand GET requests (with a browser's usual headers) one after
the other on one connection to an ASGI app that answers 200 at once; the counts of two runs
of different lengths are subtracted, so what start-up and imports cost drops out. Only the
protocol, the loop and that app run: no socket, no Litestar.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REQUEST = (
    b"GET /v1/inbox/counts HTTP/1.1\r\nHost: notify.example.com\r\n"
    b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)\r\n"
    b"Accept: application/json\r\nAccept-Language: en-GB,en;q=0.9\r\n"
    b"Accept-Encoding: gzip, deflate, br\r\nAuthorization: Bearer " + b"t" * 120 + b"\r\n"
    b"Connection: keep-alive\r\n\r\n"
)
PROTOCOLS = {
    "httptools": "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol",
    "edge": "app.processes.http_edge:EdgeProtocol",
}
SHORT, LONG = 1000, 3000


class _Transport:
    """Just what the protocol calls on its transport."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def _serve(protocol_path: str, requests: int) -> None:
    from uvicorn.config import Config  # noqa: PLC0415
    from uvicorn.importer import import_from_string  # noqa: PLC0415
    from uvicorn.server import ServerState  # noqa: PLC0415

    config = Config(_app, log_config=None, access_log=False, lifespan="off")
    config.load()
    state = ServerState()
    protocol = import_from_string(protocol_path)(config, state, {}, asyncio.get_running_loop())
    protocol.connection_made(_Transport())
    for _ in range(requests):
        protocol.data_received(REQUEST)
        await asyncio.gather(*state.tasks)
    protocol.connection_lost(None)


def _count(protocol: str, requests: int) -> int:
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "callgrind.out"
        argv = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            sys.executable, __file__, "--serve", protocol, "--requests", str(requests),
        ]  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True)
        for line in out.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("callgrind wrote no totals")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=PROTOCOLS, help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=SHORT, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        import uvloop  # noqa: PLC0415 - the service's loop (``clarion api``)

        uvloop.run(_serve(PROTOCOLS[args.serve], args.requests))
        return
    for protocol in PROTOCOLS:
        per_request = (_count(protocol, LONG) - _count(protocol, SHORT)) / (LONG - SHORT)
        print(f"{protocol:10} {per_request:12,.0f} instructions per request")


if __name__ == "__main__":
    main()
