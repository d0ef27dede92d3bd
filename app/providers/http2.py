"""An HTTP/2 client over TLS for APNs, FCM and Web Push (requests with small bodies, small
answers), on asyncio: each connection is ``h2``'s client state machine under an asyncio
protocol of ours (``app.providers.http2_connection``), ``h2`` framing, coding header blocks
(``app.providers.http2_hpack``), keeping the flow-control windows and answering PINGs.

A ``Client`` keeps ``connections`` connections to one server (ALPN ``h2``; certificate and host
name verified against ``ca_file`` or certifi, or by the ``tls`` context it is given), taken in
turn, each carrying requests as concurrent streams up to the server's
SETTINGS_MAX_CONCURRENT_STREAMS; beyond it requests wait for a free stream, first come first
served, and all of them wait for the server's first SETTINGS. A request costs no task and no
write of its own: its frames join the connection's output, written once per loop turn for every
request of that turn, and it awaits a future that the protocol callback resolves. Bodies go out
as DATA frames within the server's flow-control windows (connection and stream), in the order
they came. Answers are taken in without flow-control round trips: each stream may receive 1 MiB
(an answer is cut at ``max_body_bytes``, far below) and the connection 16 MiB, its window
topped up by ``h2`` as answers are read. A connection silent for ``keepalive_seconds`` gets a
PING, and is closed if silent as long again. After a GOAWAY a connection takes no new stream: those
above its last stream id fail, the others finish, later requests open a new connection. A
server that breaks the protocol gets a GOAWAY naming the error, and the connection is dropped
(its streams fail as a lost connection does).

Where a connection goes: by default the host name is resolved by the system when a connection
is opened. A client given ``addresses`` (Web Push, whose endpoints come from whoever sends
notifications) asks it for the addresses of each connection it opens and connects to them by
number, in turn until one takes the connection, resolving nothing itself; TLS still sends the
host name (SNI) and verifies the certificate for it. ``app.providers.ssrf.Policy.addresses``
is such a source: what it answers was checked, and what it refuses (``Refused``,
``Unresolvable``) reaches the caller of ``request`` as it was raised, nothing having been
sent.

Failures are classed as in ``app.providers.http``. Certainly not sent (``not_accepted``): no
connection, TLS refused, no ``h2``, no connection or free stream within
``connect_timeout_seconds``, the stream refused (REFUSED_STREAM) or above a GOAWAY's last
stream id, the connection lost before the request's frames were written. May have sent: no
answer within ``timeout_seconds``, another reset, the connection lost after. The texts name
the failure's kind (``failed``); a client for a recipient's server words them with the host
(``unreachable``, given as ``failure``).

Why ``h2`` under a protocol of ours and not a general HTTP/2 client: against the local APNs
peer (own process, 128 requests in flight, uvloop, two cores) httpx 0.28 with ``http2=True``
made 670 to 980 requests/s at 1,020 to 1,450 µs of CPU each, its pool and per-request tasks
around the same ``h2``. Driven directly, one write and one read a loop turn for every request
of that turn, ``h2`` costs 78 to 103 µs of CPU a send against the FCM peer, two to three
times what a hand-written client cost, and meets the push targets with room to spare
(``docs/performance.md``, "HTTP/2 through h2").
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from app.catalog.providers import ProviderLimits
from app.providers import http
from app.providers.base import ProviderError
from app.providers.http2_connection import (
    KEEPALIVE_SECONDS,
    Connection,
    Failed,
    Fields,
    Response,
    Retry,
)
from streams.core.vocabulary import ErrorClass

__all__ = ["Addresses", "Client", "Failed", "Response", "answer", "tls_context", "unreachable"]

# The addresses to connect to for a host and port, each one allowed (see the module's text).
Addresses = Callable[[str, int], Awaitable[Sequence[str]]]
# How a request that got no answer is worded: the failure and the host it went to.
Failure = Callable[[Failed, str], ProviderError]

# ``unreachable``'s words by the failure's kind; other kinds by whether the request left.
_UNREACHABLE: Final = {
    "ConnectError": "cannot connect to {host}{detail}",
    "TLSError": "TLS with {host} refused{detail}",
    "ConnectTimeout": "no connection to {host} in time",
    "NoFreeStream": "no free stream to {host} in time",
    "NoHttp2": "{host} does not speak HTTP/2",
    "ReadTimeout": "{host} did not answer in time",
}


def tls_context(ca_file: str = "") -> ssl.SSLContext:
    """``http.tls_context`` offering only ``h2`` (ALPN)."""
    context = http.tls_context(ca_file)
    context.set_alpn_protocols(["h2"])
    return context


def failed(name: str, failure: Failed) -> ProviderError:
    """The ``ProviderError`` for a request without an answer, naming the failure's kind."""
    if failure.sent:
        text = f"no answer ({failure.kind}): it may have sent"
    else:
        text = f"not sent ({failure.kind}{f': {failure.detail}' if failure.detail else ''})"
    return ProviderError(ErrorClass.TRANSIENT, f"{name}: {text}", not_accepted=not failure.sent)


def unreachable(failure: Failed, host: str) -> ProviderError:
    """The ``ProviderError`` for a request to a recipient's server (a Web Push endpoint's)
    without an answer, naming ``host`` and what went wrong, never the URL."""
    words = _UNREACHABLE.get(failure.kind)
    if words is None and failure.sent:
        # The server may have had the request: it is retried there, never sent elsewhere.
        words = "connection to {host} broke ({kind})"
    elif words is None:
        words = "the request to {host} never left ({kind})"
    detail = f": {failure.detail}" if failure.detail else ""
    text = words.format(host=host, detail=detail, kind=failure.kind)
    return ProviderError(ErrorClass.TRANSIENT, text, not_accepted=not failure.sent)


def answer(response: Response) -> http.Answer:
    """An HTTP/2 answer as ``app.providers.http``'s classification reads one."""
    headers = CIMultiDictProxy(CIMultiDict(response.headers))
    return http.Answer(response.status, headers, response.body)


class Client:
    """HTTP/2 connections to one server for one adapter (see the module documentation)."""

    keepalive_seconds = KEEPALIVE_SECONDS
    max_body_bytes = http.MAX_ANSWER_BYTES  # of an answer

    def __init__(
        self,
        name: str,
        limits: ProviderLimits,
        url: str,
        ca_file: str = "",
        connections: int = 1,
        *,
        tls: ssl.SSLContext | None = None,
        addresses: Addresses | None = None,
        failure: Failure | None = None,
    ) -> None:
        self.name, self._limits, self._ca_file = name, limits, ca_file
        parsed = URL(url)
        self._host, self._port = parsed.raw_host or "", parsed.port or 443
        host = f"[{self._host}]" if ":" in self._host else self._host
        self.authority = host if self._port == 443 else f"{host}:{self._port}"
        self._scheme = ((b":scheme", b"https"), (b":authority", self.authority.encode()))
        self._tls = tls
        self._addresses = addresses
        self._failure = failure or self._failed
        # Each connection of the pool, as the task that opens it.
        self._slots: list[asyncio.Task[Connection] | None] = [None] * connections
        self._turn = 0
        self._all: set[Connection] = set()

    async def request(self, method: bytes, path: str, fields: Fields, body: bytes) -> Response:
        """Send one request (``fields``: lowercase names, no pseudo-headers) and read its
        answer; a failure raises ``ProviderError``, ``not_accepted`` when nothing was sent."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        end = now + self._limits.timeout_seconds
        until = min(now + self._limits.connect_timeout_seconds, end)
        request = [(b":method", method), *self._scheme, (b":path", path.encode()), *fields]
        try:
            while True:
                try:
                    connection = await self._connection(until)
                    return await connection.exchange(request, body, until, end)
                except Retry:
                    if loop.time() >= until:
                        raise TimeoutError from None
        except TimeoutError:
            failure = Failed("NoFreeStream", sent=False)
        except Failed as caught:
            failure = caught
        raise self._failure(failure, self._host)

    def _failed(self, failure: Failed, host: str) -> ProviderError:
        return failed(self.name, failure)

    async def _connection(self, until: float) -> Connection:
        """The pool's next connection, opened (or being opened) within ``until``."""
        index = self._turn = (self._turn + 1) % len(self._slots)
        task = self._slots[index]
        if task is not None and task.done() and not task.cancelled() and not task.exception():
            connection = task.result()
            if connection.usable:
                return connection
        if task is None or task.done():
            task = self._slots[index] = asyncio.get_running_loop().create_task(self._connect())
        try:
            async with asyncio.timeout_at(until):
                return await asyncio.shield(task)
        except TimeoutError:
            raise Failed("ConnectTimeout", sent=False) from None

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        connection = Connection(loop, self.max_body_bytes, self.keepalive_seconds)
        if self._tls is None:
            self._tls = tls_context(self._ca_file)
        # Exceptions of ``addresses`` are the caller's (a refused host): nothing was sent.
        numbers = None if self._addresses is None else await self._addresses(*self.origin)
        try:
            async with asyncio.timeout(self._limits.connect_timeout_seconds):
                if numbers is None:
                    transport, _ = await loop.create_connection(
                        lambda: connection, self._host, self._port, ssl=self._tls
                    )
                else:
                    transport, _ = await loop.create_connection(
                        lambda: connection,
                        sock=await self._socket(loop, numbers),
                        ssl=self._tls,
                        server_hostname=self._host,
                    )
            if transport.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
                transport.close()
                raise Failed("NoHttp2", sent=False, detail="the server does not speak HTTP/2")
        except TimeoutError:  # connecting or TLS: the socket is closed already
            raise Failed("ConnectTimeout", sent=False) from None
        except ssl.SSLError as error:
            detail = getattr(error, "verify_message", "") or error.reason or ""
            raise Failed("TLSError", sent=False, detail=detail) from None
        except OSError as error:
            detail = os.strerror(error.errno) if error.errno else type(error).__name__
            raise Failed("ConnectError", sent=False, detail=detail) from None
        self._all.add(connection)
        connection.lost.add_done_callback(lambda _: self._all.discard(connection))
        return connection

    @property
    def origin(self) -> tuple[str, int]:
        """The server's host (an IPv6 address without brackets) and port."""
        return self._host, self._port

    async def _socket(
        self, loop: asyncio.AbstractEventLoop, numbers: Sequence[str]
    ) -> socket.socket:
        """A TCP connection to the first of ``numbers`` (IP addresses) that takes one."""
        refused: OSError = ConnectionRefusedError(0, "no address to connect to")
        for number in numbers:
            family = socket.AF_INET6 if ":" in number else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, (number, self._port))
            except OSError as error:
                sock.close()
                refused = error
                continue
            except BaseException:  # the time limit
                sock.close()
                raise
            return sock
        raise refused

    async def close(self) -> None:
        """Close every connection (requests still open fail)."""
        for task in filter(None, self._slots):
            task.cancel()
        self._slots = [None] * len(self._slots)
        connections = list(self._all)
        for connection in connections:
            connection.close()
        if connections:
            await asyncio.wait([each.lost for each in connections], timeout=1.0)  # TLS shutdowns
        for connection in connections:
            if not connection.lost.done():
                connection.transport.abort()
