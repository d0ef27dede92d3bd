"""The API server's edge: the bounds uvicorn's httptools protocol does not keep by itself.

uvicorn (0.54) with httptools buffers a request head of any size (one 64 MiB header was read
whole, and the process grew by as much) for as long as the client takes to send it: its
keep-alive timer is cancelled by the first byte of a request, and a connection that sends
nothing has no timer at all. Its h11 protocol bounds the head's size, but not its time, and
parses in Python. ``EdgeProtocol`` is the httptools protocol with both bounds:

- a head (request line and headers) over ``CLARION_MAX_HEADER_BYTES`` is answered 431 and
  the connection closed; no more of it is read;
- a head not complete ``CLARION_HEADER_TIMEOUT`` seconds after the connection opened (or,
  on a kept-alive connection, after its first byte came) ends the connection, with a 408
  when some of it came;
- a body that goes ``CLARION_BODY_TIMEOUT`` seconds (at least the head's) without a byte
  coming ends the connection too (408 unless an answer has begun; the app sees the client
  leave). Time while the server itself stopped reading, because the app has not taken what
  came, does not count.

uvicorn's ``limit_concurrency`` (``CLARION_MAX_CONNECTIONS``) counts the connections (idle
kept-alive ones and inbox streams too) and requests a process holds; past it uvicorn answers
a plain-text 503. Here the same test is made, and the answer is JSON with ``Retry-After``,
like the API's other refusals, on a connection that then closes.

The cost, counted by ``bench/http_edge.py``: some 9,700 instructions per request on top of
the 139,500 of uvicorn's protocol alone: a few microseconds, where a single
``POST /v1/notifications`` costs the API process some 330 µs of CPU.

Bytes of a pipelined request that came in the same read as the end of the one before are
parsed before they are counted: a head may pass the limit by at most one read (256 KiB).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from uvicorn._types import ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.settings import Settings

# How long a client refused for load should wait before it tries again (seconds).
BUSY_RETRY_AFTER_S: Final = 1


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """How large a request head may be, and how long a client may take to send it."""

    max_bytes: int
    timeout_s: float
    body_timeout_s: float


@functools.cache
def head_limits() -> HeadLimits:
    """The limits of this process, from the environment (as ``app.processes.api.build``
    reads its settings): uvicorn makes the protocol, and passes it nothing of Clarion's."""
    settings = Settings.from_env()
    return HeadLimits(
        settings.max_header_bytes, settings.header_timeout_seconds, settings.body_timeout_seconds
    )


class EdgeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the request head bounded in size and in time."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._app = self.app
        # Past CLARION_MAX_CONNECTIONS the answer is ``_busy``, not uvicorn's plain text.
        self._limit, self.limit_concurrency = self.limit_concurrency, None
        limits = head_limits()
        self._max_head_bytes = limits.max_bytes
        self._head_timeout_s = limits.timeout_s
        self._body_timeout_s = limits.body_timeout_s
        self._body_read_at = 0.0  # when the last bytes of the body being read came
        self._head_bytes = 0  # of the head being read
        self._reading_head = True  # False from the end of a head to the end of its body
        self._heads = 0  # read whole on this connection
        # One timer per connection, not one per request: when it fires, it ends the
        # connection if a head is being read since ``_head_started`` for too long, or is
        # armed again for the rest of the time (``_head_timed_out``).
        self._head_started = 0.0
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._head_started = self.loop.time()
        self._arm_head_timer(self._head_timeout_s)  # one that sends nothing is timed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._reading_head:  # a body
            self._body_read_at = self.loop.time()
            if self._head_timer is None:
                self._arm_head_timer(self._body_timeout_s)
            super().data_received(data)
            return
        if self._head_bytes == 0 and self._heads:  # the next request on a kept-alive connection
            self._head_started = self.loop.time()
            if self._head_timer is None:
                self._arm_head_timer(self._head_timeout_s)
        allowed = self._max_head_bytes - self._head_bytes
        if len(data) <= allowed:
            self._head_bytes += len(data)
            super().data_received(data)
            return
        # This read goes past the limit: the head must end within what is allowed of it.
        heads = self._heads
        super().data_received(data[:allowed])
        if self.transport.is_closing():
            return  # the parser refused it already (400)
        if self._heads == heads:
            self._refuse(431, b"Request Header Fields Too Large", self._too_large())
            return
        super().data_received(data[allowed:])

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._heads += 1
        self._body_read_at = self.loop.time()
        limit = self._limit  # uvicorn's own test for limit_concurrency, made here instead
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            # uvicorn would answer its plain-text 503 here: the app answering is this one.
            self.app = _busy
            try:
                super().on_headers_complete()
            finally:
                self.app = self._app
            return
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading_head = True  # what comes next is the next request's head
        self._head_bytes = 0

    def _arm_head_timer(self, delay_s: float) -> None:
        self._head_timer = self.loop.call_later(delay_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if not self._reading_head:
            self._body_timed_out()
            return
        if self._head_bytes == 0 and self._heads:
            return  # idle between requests: uvicorn's keep-alive timeout closes it
        left = self._head_started + self._head_timeout_s - self.loop.time()
        if left > 0:  # another head than the one the timer was armed for
            self._arm_head_timer(left)
            return
        if self._head_bytes == 0:
            self.transport.close()  # nothing came: nobody to tell
            return
        detail = f"the request head was not complete within {self._head_timeout_s:g} s"
        self._refuse(408, b"Request Timeout", detail)

    def _body_timed_out(self) -> None:
        """A body is being read: end the connection if no byte of it came for too long."""
        now = self.loop.time()
        if self.flow.read_paused:  # the app has not taken what came: not the client's fault
            self._body_read_at = now
        left = self._body_read_at + self._body_timeout_s - now
        if left > 0:
            self._arm_head_timer(left)
            return
        detail = (
            f"no byte of the request body came for {self._body_timeout_s:g} s "
            "(CLARION_BODY_TIMEOUT)"
        )
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()  # the answer has begun: it cannot be another
            return
        self._refuse(408, b"Request Timeout", detail)

    def _too_large(self) -> str:
        return (
            f"the request head (request line and headers) is over {self._max_head_bytes} "
            "bytes (CLARION_MAX_HEADER_BYTES)"
        )

    def _refuse(self, status: int, reason: bytes, detail: str) -> None:
        """Answer ``status`` with the API's JSON error body and close the connection."""
        self._disarm_head_timer()
        self._reading_head = False  # nothing more of this connection is read
        body = msgspec.json.encode({"status_code": status, "detail": detail})
        head = b"HTTP/1.1 %d %s\r\n" % (status, reason)
        head += b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body)
        self.transport.write(head + b"connection: close\r\n\r\n" + body)
        self.transport.close()


_BUSY_BODY: Final = msgspec.json.encode(
    {
        "status_code": 503,
        "detail": "the server holds as many connections and requests as it may "
        "(CLARION_MAX_CONNECTIONS); try again shortly",
    }
)


async def _busy(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """The answer past the concurrency limit; the connection closes after it, freeing its
    place."""
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(_BUSY_BODY)).encode()),
        (b"retry-after", str(BUSY_RETRY_AFTER_S).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": _BUSY_BODY, "more_body": False})
