"""A lean HTTP/1.1 load generator: requests made beforehand, sent over keep-alive connections.

A benchmark whose requests differ one from the next (each signed, each with its own id) cannot
use wrk's one request shape, and a full client (aiohttp) costs about as much CPU per request as
the service it measures, on the same two cores. Here each request is bytes made before the
clock starts; each connection writes one, waits for its whole answer (``httptools`` parses it)
and writes the next, so the load generator costs a few tens of microseconds per request.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from functools import partial
from typing import cast

import httptools


def request_bytes(
    host: str, path: str, body: bytes, headers: Mapping[str, str], method: str = "POST"
) -> bytes:
    """One HTTP/1.1 request with ``body`` and ``headers`` (Content-Length added)."""
    head = [f"{method} {path} HTTP/1.1", f"host: {host}", f"content-length: {len(body)}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class _Connection(asyncio.Protocol):
    """Sends the requests it takes from a shared iterator one at a time, counting statuses."""

    def __init__(
        self, requests: Iterator[bytes], statuses: Counter[int], done: asyncio.Future[None]
    ):
        self.requests = requests
        self.statuses = statuses
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.finished = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of it
        self._send_next()

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)
        if self.finished:
            self.finished = False
            self.statuses[self.parser.get_status_code()] += 1
            self._send_next()

    def on_message_complete(self) -> None:  # httptools callback
        self.finished = True

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost mid-run: {exc}"))

    def _send_next(self) -> None:
        assert self.transport is not None
        request = next(self.requests, None)
        if request is None:
            if not self.done.done():
                self.done.set_result(None)
            self.transport.close()
            return
        self.transport.write(request)


async def send_all(
    host: str, port: int, requests: list[bytes], connections: int
) -> tuple[float, Counter[int]]:
    """Send every request once over ``connections`` connections; seconds from the first write
    to the last answer, and the answers' statuses."""
    loop = asyncio.get_running_loop()
    shared = iter(requests)
    statuses: Counter[int] = Counter()
    started = time.perf_counter()
    done = [loop.create_future() for _ in range(connections)]
    for future in done:
        await loop.create_connection(partial(_Connection, shared, statuses, future), host, port)
    await asyncio.gather(*done)
    return time.perf_counter() - started, statuses
