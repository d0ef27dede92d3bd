"""What the HTTP API peers (``sendgrid``, ``twilio``) share: an ASGI base that reads requests,
counts connections and plays scripted faults, and uvicorn serving it on 127.0.0.1.

``serve(peer)`` runs uvicorn (httptools, keep-alive) in a thread of its own, for tests that
inspect the peer directly. A benchmark wants the peer out of its own process (a thread would
share the client's interpreter lock): ``python -m tests.peers.sendgrid --port 8025`` serves
it alone, and ``GET /_peer/stats`` answers ``{"accepted", "requests", "connections"}``.

A fault is switched on with ``peer.fail(Fault.RATE_LIMITED, times=2)`` and answered in the
provider's own error shape; ``Fault.HANG`` holds the request until the client gives up or the
peer stops.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import uvicorn

Scope = dict[str, Any]
# How long a hung request waits at most (a test's client times out long before).
HANG_SECONDS = 30.0


class Fault(StrEnum):
    """A failure every HTTP API can have, switched on for the next requests."""

    RATE_LIMITED = "429"
    ERROR = "500"
    UNAVAILABLE = "503"
    HANG = "hang"


@dataclass
class Request:
    """One request as the peer read it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client: tuple[str, int]


@dataclass
class Answer:
    """What the peer answers."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, value: Any, **headers: str) -> Answer:
        return cls(
            status, json.dumps(value).encode(), {"content-type": "application/json", **headers}
        )


class HttpPeer:
    """An ASGI app answering like a provider; subclasses give ``handle`` and ``fault_answer``."""

    # The largest request body read; beyond it the peer answers ``too_large``.
    max_body_bytes = 1024 * 1024

    def __init__(self) -> None:
        self.requests = 0
        # What the peer took, in the order it took it (the subclass says what an item is).
        self.accepted: list[Any] = []
        # Every connection is one client (host, port): keep-alive shows as few of them.
        self.connections: set[tuple[str, int]] = set()
        self._fault: Fault | None = None
        self._fault_times: int | None = None
        self.retry_after: str | None = "3"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._released: asyncio.Event | None = None

    def fail(
        self, fault: Fault, *, times: int | None = None, retry_after: str | None = "3"
    ) -> None:
        """Answer the next ``times`` requests (all, if None) with ``fault``."""
        self.retry_after = retry_after
        self._fault_times = times
        self._fault = fault

    def heal(self) -> None:
        """Answer normally again."""
        self._fault = None

    def release(self) -> None:
        """Let hung requests go (the peer is stopping)."""
        if self._loop is not None and self._released is not None:
            self._loop.call_soon_threadsafe(self._released.set)

    async def handle(self, request: Request) -> Answer:
        raise NotImplementedError

    def fault_answer(self, fault: Fault) -> Answer:
        raise NotImplementedError

    def too_large(self) -> Answer:
        return Answer(413)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if self._released is None:
            self._loop = asyncio.get_running_loop()
            self._released = asyncio.Event()
        client = tuple(scope.get("client") or ("", 0))
        self.connections.add((str(client[0]), int(client[1])))
        self.requests += 1
        body = await _body(receive, self.max_body_bytes)
        if scope["path"] == "/_peer/stats":
            answer = Answer.json(200, self.stats())
        elif body is None:
            answer = self.too_large()
        else:
            answer = await self._answer(scope, body)
        await _send(send, answer)

    def stats(self) -> dict[str, int]:
        return {
            "accepted": len(self.accepted),
            "requests": self.requests,
            "connections": len(self.connections),
        }

    async def _answer(self, scope: Scope, body: bytes) -> Answer:
        fault = self._take_fault()
        if fault is Fault.HANG:
            assert self._released is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), HANG_SECONDS)
            return Answer(504)
        if fault is not None:
            return self.fault_answer(fault)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        client = scope.get("client") or ("", 0)
        request = Request(scope["method"], scope["path"], headers, body, (client[0], client[1]))
        return await self.handle(request)

    def _take_fault(self) -> Fault | None:
        fault = self._fault
        if fault is None or self._fault_times is None:
            return fault
        self._fault_times -= 1
        if self._fault_times <= 0:
            self._fault = None
        return fault


async def _body(receive: Any, limit: int) -> bytes | None:
    """The request body, or None when it is longer than ``limit`` (read to its end anyway,
    so the connection stays usable)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            break
        chunk = event.get("body", b"")
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        if not event.get("more_body", False):
            break
    return b"".join(chunks) if size <= limit else None


async def _send(send: Any, answer: Answer) -> None:
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


def _config(peer: HttpPeer) -> uvicorn.Config:
    return uvicorn.Config(
        peer,
        http="httptools",
        loop="uvloop",
        lifespan="off",
        ws="none",
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=60,
        timeout_graceful_shutdown=1,
    )


@dataclass(frozen=True)
class Served:
    """A running peer's address."""

    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def serve(peer: HttpPeer, port: int = 0) -> Iterator[Served]:
    """Serve ``peer`` on 127.0.0.1 in a thread, on ``port`` (a free one if 0); stop it
    afterwards."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    server = uvicorn.Server(_config(peer))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the peer did not start")
            time.sleep(0.01)
        yield Served(listener.getsockname()[1])
    finally:
        peer.release()
        server.should_exit = True
        thread.join(10)
        listener.close()


def main(peer: HttpPeer, description: str) -> None:
    """Serve ``peer`` in this process until interrupted (for benchmarks)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, default=0)
    port = parser.parse_known_args()[0].port  # a peer reads its own options itself
    config = _config(peer)
    config.host, config.port = "127.0.0.1", port
    uvicorn.Server(config).run()
