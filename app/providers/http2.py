"""An HTTP/2 client over TLS for APNs, on ``h2`` (the protocol's state machine) and asyncio.

A ``Client`` keeps ``connections`` connections to one server (ALPN ``h2``; certificate and
host name verified against ``ca_file`` or certifi), taken in turn, each carrying requests as
concurrent streams up to the server's SETTINGS_MAX_CONCURRENT_STREAMS; beyond it requests
wait for a free stream, first come first served. A request costs no task and no write of its
own: its frames go into the ``h2`` buffer, written once per loop turn for all the requests
of that turn, and it awaits a future the protocol callback resolves. Received data is
acknowledged at once (``h2`` sends WINDOW_UPDATE); a body, one DATA frame (16 KB at most, the
least frame size a server may set), waits for the send window to hold it. A connection
silent for ``keepalive_seconds`` gets a PING, and is closed if silent as long again. After a
GOAWAY a connection takes no new stream: those above its last_stream_id fail, the others
finish, later requests open a new connection. HPACK goes without Huffman coding (20 µs a
request in Python, to save 30 bytes); fields that change per request (``unique``) stay out
of its table, so the fixed ones are one byte each.

Failures are classed as in ``app.providers.http``. Certainly not sent (``not_accepted``): no
connection, TLS refused, no ``h2``, no connection or free stream within
``connect_timeout_seconds``, the stream refused (REFUSED_STREAM) or above a GOAWAY's
last_stream_id, the connection lost before the request's frames were written. May have
sent: no answer within ``timeout_seconds``, another reset, the connection lost after.

Why not httpx with h2: against the local APNs peer (``tests.peers.apns``, own process, 64
requests in flight, uvloop, two cores) httpx 0.28 with ``http2=True`` made 670 to 980
requests/s at 1,020 to 1,450 µs of CPU each (httpcore's pool, a task, locks and awaits around
the same ``h2`` calls); this client makes 3,800 to 4,270/s at 180 to 195 µs, mostly ``h2``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import Sequence
from typing import Any, Final, cast

import hpack
from h2 import errors, events, exceptions, settings
from h2.config import H2Configuration
from h2.connection import ConnectionInputs, H2Connection, H2ConnectionStateMachine
from yarl import URL

from app.catalog.providers import ProviderLimits
from app.providers import http
from app.providers.base import ProviderError
from streams.vocabulary import ErrorClass

MAX_STREAMS: Final = 1000
LAST_STREAM_ID: Final = 2**31 - 3  # then a connection is used up
KEEPALIVE_SECONDS: Final = 60.0

Fields = Sequence[tuple[bytes, bytes]]
_CODES = errors.ErrorCodes
_SETTINGS: Final = {settings.SettingCodes.ENABLE_PUSH: 0}  # h2 bounds header lists to 64 KB
# Our requests' fields are well formed (adapters build them): h2's checks of them cost more
# than the rest of a request's frames. Answers are checked.
_CONFIG = H2Configuration(
    header_encoding=None, validate_outbound_headers=False, normalize_outbound_headers=False
)


def unique(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A field whose value changes from request to request: not indexed by HPACK."""
    return hpack.NeverIndexedHeaderTuple(name, value)


class _Encoder(hpack.Encoder):
    def encode(self, headers: Any, huffman: bool = False) -> bytes:
        return super().encode(headers, huffman=False)


class _StateMachine(H2ConnectionStateMachine):
    """h2 ends a connection at a GOAWAY and would refuse the answers of the streams the
    server still finishes (RFC 9113 6.8): here it stays open, and takes no new stream."""

    def process_input(self, input_: ConnectionInputs) -> list[events.Event]:
        return [] if input_ is ConnectionInputs.RECV_GOAWAY else super().process_input(input_)


class _Failed(Exception):  # no answer; ``sent``: the request may have reached the server
    def __init__(self, kind: str, *, sent: bool, detail: str = "") -> None:
        super().__init__(kind)
        self.kind, self.sent, self.detail = kind, sent, detail


class _Retry(Exception):
    """The connection takes no new stream: the request goes to another."""


class Response:
    """An answer: ``status``, ``headers`` (lowercase names) and ``body``."""

    __slots__ = ("batch", "body", "chunks", "future", "headers", "size", "status")

    def __init__(self, future: asyncio.Future[Response], batch: int) -> None:
        self.future = future
        self.batch = batch  # the connection's writes when queued: its frames left once more
        self.status = self.size = 0
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.body = b""


class _Connection(asyncio.Protocol):
    """One HTTP/2 connection: its streams, the requests waiting for one, its keepalive."""

    transport: asyncio.Transport  # from ``connection_made`` on
    _timer: asyncio.TimerHandle

    def __init__(self, loop: asyncio.AbstractEventLoop, max_body: int, keepalive: float) -> None:
        self._loop, self._max_body, self._keepalive = loop, max_body, keepalive
        self._h2 = H2Connection(_CONFIG)
        self._h2.encoder, self._h2.state_machine = _Encoder(), _StateMachine()
        self._h2.local_settings = settings.Settings(client=True, initial_values=_SETTINGS)
        self._streams: dict[int, Response] = {}
        self._free = asyncio.Semaphore(0)  # streams the server allows beyond those open
        self._limit = self._owed = 0  # owed: streams to take back (the limit was lowered)
        self._blocked: dict[int, bytes] = {}  # bodies waiting for the send window
        self._writes = self._received = self._seen = 0
        self._flushing = self._pinged = self.usable = self._draining = False
        self.lost: asyncio.Future[None] = loop.create_future()

    async def exchange(self, fields: Fields, body: bytes, until: float, end: float) -> Response:
        """Send one request on a stream of this connection and await its answer."""
        if self._free.locked():
            async with asyncio.timeout_at(until):  # TimeoutError: no free stream in time
                await self._free.acquire()
        else:
            await self._free.acquire()
        if not self.usable or self._h2.highest_outbound_stream_id >= LAST_STREAM_ID:
            self._drain()  # and the next waiter learns it too
            raise _Retry
        stream_id = self._h2.get_next_available_stream_id()
        self._h2.send_headers(stream_id, fields, end_stream=not body)
        stream = self._streams[stream_id] = Response(self._loop.create_future(), self._writes)
        if body:
            self._blocked[stream_id] = body
            self._send_blocked()
        self._schedule_flush()
        timer = self._loop.call_at(end, self._reset, stream_id, "ReadTimeout")
        try:
            return await stream.future
        finally:
            timer.cancel()
            if stream_id in self._streams:  # the caller gave up
                self._reset(stream_id, "Cancelled")

    def _send_blocked(self) -> None:  # in the order they came, while the window holds them
        for stream_id, body in list(self._blocked.items()):
            if self._h2.local_flow_control_window(stream_id) < len(body):
                return
            self._h2.send_data(stream_id, body, end_stream=True)
            del self._blocked[stream_id]

    def _schedule_flush(self) -> None:
        if not self._flushing:
            self._flushing = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        data = self._h2.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)
            self._writes += 1

    def _finish(self, stream_id: int, error: BaseException | None) -> None:
        """The stream ended (``error`` None) or failed: its place is free again."""
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        if not stream.future.done() and error is not None:
            stream.future.set_exception(error)
        elif not stream.future.done():
            stream.body = b"".join(stream.chunks)
            stream.future.set_result(stream)
        self._blocked.pop(stream_id, None)
        if self._owed:
            self._owed -= 1
        else:
            self._free.release()
        if self._draining and not self._streams:
            self.transport.close()

    def _reset(self, stream_id: int, kind: str) -> None:
        self._finish(stream_id, _Failed(kind, sent=True))
        with contextlib.suppress(exceptions.ProtocolError):
            self._h2.reset_stream(stream_id, _CODES.CANCEL)
        self._schedule_flush()

    def _drain(self) -> None:  # take no new stream; close once the open ones end
        self.usable, self._draining = False, True
        self._free.release()  # each woken waiter finds it unusable and wakes the next
        if not self._streams:
            self.transport.close()

    def close(self) -> None:  # open streams fail as the connection goes
        self.usable = False
        if not self.transport.is_closing():
            with contextlib.suppress(exceptions.ProtocolError):
                self._h2.close_connection()
            self._flush()
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.usable = True  # requests wait for the server's SETTINGS on ``_free``
        self._timer = self._loop.call_later(self._keepalive, self._tick)
        self._h2.initiate_connection()
        self._flush()

    def data_received(self, data: bytes) -> None:
        self._received += 1
        try:
            happened = self._h2.receive_data(data)
        except exceptions.ProtocolError:
            self._flush()  # h2's GOAWAY
            self.transport.abort()
            return
        for event in happened:
            cls = type(event)
            if cls is events.ResponseReceived:
                self._on_response(event)
            elif cls is events.DataReceived:
                self._on_data(event)
            elif cls is events.StreamEnded:
                self._finish(event.stream_id, None)  # type: ignore[attr-defined]
            elif cls is events.StreamReset:
                sent = event.error_code != _CODES.REFUSED_STREAM  # type: ignore[attr-defined]
                failure = _Failed("StreamReset" if sent else "RefusedStream", sent=sent)
                self._finish(event.stream_id, failure)  # type: ignore[attr-defined]
            elif cls is events.RemoteSettingsChanged:
                self._on_settings()
            elif cls is events.WindowUpdated and self._blocked:
                self._send_blocked()
            elif cls is events.ConnectionTerminated:
                self._on_goaway(event)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        for stream in self._streams.values():
            if not stream.future.done():
                left = self._writes > stream.batch
                stream.future.set_exception(_Failed("ConnectionLost", sent=left))
        self._streams, self._blocked = {}, {}
        self._drain()
        if not self.lost.done():
            self.lost.set_result(None)

    def _on_response(self, event: Any) -> None:
        stream = self._streams.get(event.stream_id)
        if stream is not None:
            stream.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in event.headers}
            stream.status = int(stream.headers.pop(":status", 0))

    def _on_data(self, event: Any) -> None:
        self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        stream = self._streams.get(event.stream_id)
        if stream is not None and event.data:
            stream.size += len(event.data)
            stream.chunks.append(event.data)
            if stream.size > self._max_body:
                self._reset(event.stream_id, "AnswerTooLarge")

    def _on_settings(self) -> None:
        limit = min(self._h2.remote_settings.max_concurrent_streams, MAX_STREAMS)
        self._owed, self._limit = self._owed - (limit - self._limit), limit
        for _ in range(-self._owed):
            self._free.release()
        self._owed = max(self._owed, 0)
        if self._blocked:
            self._send_blocked()

    def _on_goaway(self, event: Any) -> None:
        for stream_id in list(self._streams):
            if stream_id > event.last_stream_id:
                self._finish(stream_id, _Failed("GoAway", sent=False))
        if event.error_code != _CODES.NO_ERROR:
            self.transport.close()
        self._drain()

    def _tick(self) -> None:
        """Keepalive: PING after a silent interval; close after a second one."""
        if self.transport.is_closing():
            return
        if self._received == self._seen and self._pinged:
            self.transport.abort()
            return
        self._pinged = self._received == self._seen
        if self._pinged:
            self._h2.ping(b"clarion!")
            self._flush()
        self._seen = self._received
        self._timer = self._loop.call_later(self._keepalive, self._tick)


class Client:
    """HTTP/2 connections to one server for one adapter (see the module documentation)."""

    keepalive_seconds = KEEPALIVE_SECONDS
    max_body_bytes = http.MAX_ANSWER_BYTES  # of an answer

    def __init__(
        self, name: str, limits: ProviderLimits, url: str, ca_file: str = "", connections: int = 1
    ) -> None:
        self.name, self._limits, self._ca_file = name, limits, ca_file
        parsed = URL(url)
        self._host, self._port = parsed.raw_host or "", parsed.port or 443
        self.authority = self._host if self._port == 443 else f"{self._host}:{self._port}"
        self._scheme = ((b":scheme", b"https"), (b":authority", self.authority.encode()))
        self._tls: ssl.SSLContext | None = None
        # Each connection of the pool, as the task that opens it.
        self._slots: list[asyncio.Task[_Connection] | None] = [None] * connections
        self._turn = 0
        self._all: set[_Connection] = set()

    async def request(self, method: bytes, path: str, fields: Fields, body: bytes) -> Response:
        """Send one request (``fields``: lowercase names, no pseudo-headers) and read its
        answer; a failure raises ``ProviderError``, ``not_accepted`` when nothing was sent."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        end = now + self._limits.timeout_seconds
        until = min(now + self._limits.connect_timeout_seconds, end)
        request = [(b":method", method), *self._scheme, unique(b":path", path.encode()), *fields]
        try:
            while True:
                try:
                    connection = await self._connection(until)
                    return await connection.exchange(request, body, until, end)
                except _Retry:
                    if loop.time() >= until:
                        raise TimeoutError from None
        except TimeoutError:
            failure = _Failed("NoFreeStream", sent=False)
        except _Failed as failed:
            failure = failed
        detail = f": {failure.detail}" if failure.detail else ""
        text = f"no answer ({failure.kind}): it may have sent" if failure.sent else ""
        text = text or f"not sent ({failure.kind}{detail})"
        raise ProviderError(
            ErrorClass.TRANSIENT, f"{self.name}: {text}", not_accepted=not failure.sent
        )

    async def _connection(self, until: float) -> _Connection:
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
            raise _Failed("ConnectTimeout", sent=False) from None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        connection = _Connection(loop, self.max_body_bytes, self.keepalive_seconds)
        if self._tls is None:
            self._tls = http.tls_context(self._ca_file)
            self._tls.set_alpn_protocols(["h2"])
        try:
            async with asyncio.timeout(self._limits.connect_timeout_seconds):
                transport, _ = await loop.create_connection(
                    lambda: connection, self._host, self._port, ssl=self._tls
                )
            if transport.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
                transport.close()
                raise _Failed("NoHttp2", sent=False, detail="the server does not speak HTTP/2")
        except TimeoutError:  # connecting or TLS: the socket is closed already
            raise _Failed("ConnectTimeout", sent=False) from None
        except ssl.SSLError as error:
            detail = getattr(error, "verify_message", "") or error.reason or ""
            raise _Failed("TLSError", sent=False, detail=detail) from None
        except OSError as error:
            detail = os.strerror(error.errno) if error.errno else type(error).__name__
            raise _Failed("ConnectError", sent=False, detail=detail) from None
        self._all.add(connection)
        connection.lost.add_done_callback(lambda _: self._all.discard(connection))
        return connection

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
