"""A webhook receiver on 127.0.0.1, as a customer would run one: uvicorn serving an ASGI app
(http, or https with a trustme certificate) in a thread of its own.

Every request is verified with the ``standardwebhooks`` library, as a receiver does it: a bad
or missing signature, or a timestamp more than five minutes off, is answered 401 and not
kept. Verified requests are kept in ``attempts``; those answered 2xx become ``deliveries``,
deduplicated on ``webhook-id`` (a repeat counts in ``duplicates``). A batch of status
webhooks (``{"type": "delivery.batch", "data": [...]}``) counts each status in it instead,
keyed ``<delivery_id>.<version>`` as a status sent alone is by its ``webhook-id``.
``script`` makes a path answer otherwise, once per scripted answer, in order: any status
with headers (410, 429 with Retry-After, 500, a redirect), or a hang.

For a benchmark, ``python -m tests.peers.webhook --port 8027 --secret whsec_…`` serves it in
a process of its own; ``GET /_peer/stats`` answers ``{"accepted", "requests", "duplicates",
"unverified"}`` there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
import uvicorn
from standardwebhooks import Webhook

Scope = dict[str, Any]


@dataclass(frozen=True)
class Answer:
    """What a scripted path answers (after verifying the request)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    # Wait this long before answering (or until the receiver stops).
    hang_seconds: float = 0.0


@dataclass(frozen=True)
class Attempt:
    """One verified request."""

    path: str
    webhook_id: str
    headers: dict[str, str]
    body: bytes
    # The client's (address, port): one per TCP connection.
    client: tuple[str, int]


class Receiver:
    """The ASGI app: verify, keep, answer as scripted."""

    def __init__(self, secret: str) -> None:
        self.webhook = Webhook(secret)
        self.scripts: dict[str, list[Answer]] = {}
        self.attempts: list[Attempt] = []
        self.deliveries: dict[str, Attempt] = {}
        self.duplicates = 0
        self.unverified = 0
        self._released: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def script(self, path: str, *answers: Answer) -> None:
        """``path`` answers ``answers``, one per request, then 200 again."""
        self.scripts[path] = list(answers)

    @property
    def connections(self) -> set[tuple[str, int]]:
        """The client ends of the connections verified requests came on."""
        return {attempt.client for attempt in self.attempts}

    def stats(self) -> dict[str, int]:
        """What the receiver counted (``accepted``: distinct deliveries answered 2xx)."""
        return {
            "accepted": len(self.deliveries),
            "requests": len(self.attempts) + self.unverified,
            "duplicates": self.duplicates,
            "unverified": self.unverified,
        }

    def release(self) -> None:
        """End every hang now (the receiver is stopping)."""
        if self._loop is not None and self._released is not None:
            self._loop.call_soon_threadsafe(self._released.set)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if self._released is None:
            self._loop, self._released = asyncio.get_running_loop(), asyncio.Event()
        body = await _body(receive)
        if scope["path"] == "/_peer/stats":
            await _answer(send, 200, body=json.dumps(self.stats()).encode())
            return
        headers = {
            key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]
        }
        try:
            self.webhook.verify(body, headers, json_parse=False)
        except Exception:  # the library raises several kinds for bad headers
            self.unverified += 1
            await _answer(send, 401)
            return
        parsed = _json(body)
        if headers.get("content-type") != "application/json" or parsed is None:
            await _answer(send, 400)
            return
        client = scope.get("client") or ("", 0)
        attempt = Attempt(scope["path"], headers["webhook-id"], headers, body, tuple(client))
        self.attempts.append(attempt)
        script = self.scripts.get(scope["path"])
        answer = script.pop(0) if script else Answer()
        if answer.hang_seconds:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), answer.hang_seconds)
        if 200 <= answer.status < 300:
            for key in _keys(attempt.webhook_id, parsed):
                if key in self.deliveries:
                    self.duplicates += 1
                else:
                    self.deliveries[key] = attempt
        await _answer(send, answer.status, answer.headers)


async def _body(receive: Any) -> bytes:
    parts = []
    while True:
        event = await receive()
        parts.append(event.get("body", b""))
        if not event.get("more_body"):
            return b"".join(parts)


def _json(body: bytes) -> Any:
    """The parsed body, or None when it is not JSON."""
    try:
        return json.loads(body)
    except ValueError:
        return None


def _keys(webhook_id: str, parsed: Any) -> list[str]:
    """What a 2xx answer took: the message, or each status of a batch."""
    if isinstance(parsed, dict) and parsed.get("type") == "delivery.batch":
        return [
            f"{item['data']['delivery_id']}.{item['data']['version']}" for item in parsed["data"]
        ]
    return [webhook_id]


async def _answer(
    send: Any, status: int, headers: dict[str, str] | None = None, body: bytes = b"{}"
) -> None:
    raw = [(key.encode(), value.encode()) for key, value in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


@dataclass
class Served:
    """A running receiver: where it listens."""

    receiver: Receiver
    port: int
    scheme: str

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"


@contextlib.contextmanager
def serve(receiver: Receiver, certificate: trustme.LeafCert | None = None) -> Iterator[Served]:
    """Serve ``receiver`` on a free port of 127.0.0.1 (https with ``certificate``) until the
    block ends."""
    with tempfile.TemporaryDirectory() as workdir:
        pem = ""
        if certificate is not None:
            pem = str(Path(workdir) / "receiver.pem")
            certificate.private_key_and_cert_chain_pem.write_to_path(pem)
        # With IPPROTO_TCP named, asyncio sets TCP_NODELAY on accepted connections; without
        # it every answer waits out a delayed ACK (~40 ms).
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        listener.bind(("127.0.0.1", 0))
        port = int(listener.getsockname()[1])
        config = uvicorn.Config(
            receiver, lifespan="off", ws="none", log_level="warning", access_log=False,
            ssl_certfile=pem or None, timeout_graceful_shutdown=2,
        )  # fmt: skip
        server = uvicorn.Server(config)
        thread = threading.Thread(target=lambda: asyncio.run(server.serve([listener])))
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while not server.started:
                if time.monotonic() > deadline or not thread.is_alive():
                    raise RuntimeError("the webhook receiver did not start")
                time.sleep(0.01)
            yield Served(receiver, port, "https" if certificate else "http")
        finally:
            receiver.release()
            server.should_exit = True
            thread.join(10)
            listener.close()


def main() -> None:
    """Serve a receiver in this process until interrupted (for benchmarks)."""
    parser = argparse.ArgumentParser(description="A local Standard Webhooks receiver")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--secret", required=True, help="the whsec_ signing secret")
    args = parser.parse_args()
    config = uvicorn.Config(
        Receiver(args.secret), host="127.0.0.1", port=args.port, lifespan="off", ws="none",
        log_level="warning", access_log=False, http="httptools",
    )  # fmt: skip
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
