"""A small keep-alive HTTP/1.1 client for status webhooks: one POST at a time per
connection, each lane of a sender reusing its own connection.

Why not the providers' aiohttp client (``app.providers.http``): a status webhook is a small
POST to one URL, thousands a second, and aiohttp cost 270 µs of CPU per request against a
local receiver where a request written as bytes and its answer read by ``httptools`` (the
parser uvicorn uses) cost 90 µs; the status-webhooks process would have spent most of its
two cores in aiohttp (the figures: the README's status webhook section).

Where it connects is the SSRF guard's decision: every new connection asks
``ssrf.GuardedResolver`` for the host's addresses, which refuses the host if any address may
not be called, and connects to one of exactly those (TLS verified for the host name, which
is also sent as SNI), resolving nothing itself. Connections are kept per scheme, host and
port while idle for less than ``KEEPALIVE_SECONDS`` and the server keeps them open; a
request that finds its reused connection closed before any answer came is sent once more on
a new one. The whole call, connecting included, is bounded by the time limit. An answer's
body is read and dropped, at most ``MAX_ANSWER_BYTES`` (a longer one closes the connection).

Failures raise ``Unanswered`` with a text naming the host, never the URL's path or query.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Callable
from typing import Final, cast

import httptools

from app.providers.http import tls_context
from app.providers.ssrf import GuardedResolver, Target

KEEPALIVE_SECONDS: Final = 15.0
MAX_ANSWER_BYTES: Final = 64 * 1024


class Unanswered(Exception):
    """The request got no (readable) answer; the text says why, naming the host."""


class Answer:
    """A status and the headers a sender reads."""

    __slots__ = ("retry_after", "status")

    def __init__(self, status: int, retry_after: str) -> None:
        self.status = status
        self.retry_after = retry_after


class _Connection(asyncio.Protocol):
    """One connection: writes a request, reads its answer with ``httptools``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future[Answer] | None = None
        self.closed = False
        self.idle_since = time.monotonic()
        self.received = False  # a byte of the current answer arrived
        self._status = 0
        self._retry_after = ""
        self._header = b""
        self._body_bytes = 0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without deriving from it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(Unanswered(f"an answer that is not HTTP ({type(error).__name__})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._status and self.answer is not None and not self.answer.done():
            # An answer whose body ends with the connection (no length given): its status
            # was read, and that is all a sender needs.
            self._finish(keep=False)
            return
        self._fail(ConnectionResetError("the connection was closed"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"retry-after":
            self._header = value

    def on_headers_complete(self) -> None:
        self._status = self.parser.get_status_code()
        self._retry_after = self._header.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > MAX_ANSWER_BYTES:
            # The status is known: a body this long is not read to its end.
            self._finish(keep=False)

    def on_message_complete(self) -> None:
        if 100 <= self._status < 200:  # an interim answer: the real one follows
            self._status, self._header = 0, b""
            return
        self._finish(keep=self.parser.should_keep_alive())

    # requests
    async def request(self, data: bytes, within: float) -> Answer:
        """Write ``data`` and wait ``within`` seconds at most for the answer (``TimeoutError``;
        the connection is closed then, being mid-answer). A timer of its own, not
        ``asyncio.timeout``: this runs for every POST, and the timer costs a third as much."""
        if self.transport is None or self.closed:
            raise ConnectionResetError("the connection was closed")
        loop = asyncio.get_running_loop()
        self.answer = loop.create_future()
        timer = loop.call_later(within, self._fail, TimeoutError())
        self.received = False
        self._status, self._header, self._body_bytes = 0, b"", 0
        self.transport.write(data)
        try:
            return await self.answer
        finally:
            timer.cancel()
            self.answer = None
            self.idle_since = time.monotonic()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _finish(self, *, keep: bool) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_result(Answer(self._status, self._retry_after))
        if not keep:
            self.close()

    def _fail(self, error: Exception) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(error)
        self.close()


class Http1Client:
    """Keep-alive connections for POSTs to URLs the guard checked."""

    def __init__(
        self,
        resolver: GuardedResolver,
        *,
        timeout_seconds: float,
        connect_timeout_seconds: float,
        ca_file: str = "",
    ) -> None:
        self.resolver = resolver
        self.timeout_seconds = timeout_seconds
        self.connect_timeout_seconds = connect_timeout_seconds
        self._ca_file = ca_file
        self._tls: ssl.SSLContext | None = None
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}

    async def post(self, target: Target, head: bytes, body: bytes) -> Answer:
        """POST ``head`` (the request line and headers, ending in an empty line) and ``body``
        to ``target``; its answer, or ``Unanswered``/``Refused``/``Unresolvable``."""
        origin = (target.scheme, target.host, target.port)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_seconds
        try:
            connection = self._reuse(origin)
            if connection is not None:
                try:
                    return await self._send(origin, connection, head + body, self.timeout_seconds)
                except ConnectionResetError:
                    if connection.received:
                        raise
                    # Closed by the server while idle: nothing was answered, so the request
                    # goes once more, on a new connection.
            async with asyncio.timeout_at(deadline):
                connection = await self._connect(target)
            return await self._send(origin, connection, head + body, deadline - loop.time())
        except TimeoutError:
            raise Unanswered(f"{target.host} did not answer in time") from None
        except OSError as error:  # the request may have left: the answer did not come
            raise Unanswered(
                f"connection to {target.host} broke ({type(error).__name__})"
            ) from None

    async def close(self) -> None:
        """Close every idle connection."""
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    def _reuse(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if not connection.closed and now - connection.idle_since < KEEPALIVE_SECONDS:
                return connection
            connection.close()
        return None

    async def _send(
        self, origin: tuple[str, str, int], connection: _Connection, data: bytes, within: float
    ) -> Answer:
        try:
            answer = await connection.request(data, max(0.0, within))
        except BaseException:
            connection.close()  # mid-answer (a time-out, a cancellation): not reusable
            raise
        if not connection.closed:
            self._idle.setdefault(origin, []).append(connection)
        return answer

    async def _connect(self, target: Target) -> _Connection:
        """A new connection to one of the addresses the guard allowed, in its order."""
        loop = asyncio.get_running_loop()
        resolved = await self.resolver.resolve(target.host, target.port)
        tls = self._tls_context() if target.scheme == "https" else None
        why = f"{target.host} has no address"
        for address in resolved:
            connection = _Connection()
            try:
                async with asyncio.timeout(self.connect_timeout_seconds):
                    await loop.create_connection(
                        _made(connection),
                        host=address["host"],
                        port=target.port,
                        ssl=tls,
                        server_hostname=target.host if tls is not None else None,
                    )
                return connection
            except TimeoutError:
                why = f"no connection to {target.host} in time"
            except ssl.SSLCertVerificationError as error:
                raise Unanswered(
                    f"TLS with {target.host} refused: {error.verify_message}"
                ) from None
            except ssl.SSLError as error:
                reason = error.reason or type(error).__name__
                raise Unanswered(f"TLS with {target.host} failed: {reason}") from None
            except OSError as error:
                detail = os.strerror(error.errno) if error.errno else type(error).__name__
                why = f"cannot connect to {target.host}: {detail}"
        raise Unanswered(why)

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = tls_context(self._ca_file)
        return self._tls


def _made(connection: _Connection) -> Callable[[], _Connection]:
    """The protocol factory of ``create_connection`` for a connection made beforehand."""
    return lambda: connection
