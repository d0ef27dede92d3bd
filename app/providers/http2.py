"""An HTTP/2 client over TLS for APNs, on ``h2`` (the protocol's state machine) and asyncio.

A ``Client`` keeps ``connections`` connections to one server (ALPN ``h2``; certificate and
host name verified against ``ca_file`` or certifi), each carrying requests as concurrent
streams up to the server's SETTINGS_MAX_CONCURRENT_STREAMS; beyond it a request waits for a
free stream, first come first served. A request takes the least-loaded connection; when none
is idle the next one of the pool opens meanwhile. A request costs no task and no write of its
own: its frames go into the connection's ``h2`` buffer, written once per loop turn for all
the requests of that turn, and it awaits a future the protocol callback resolves. Received
data is acknowledged at once (``h2`` sends WINDOW_UPDATE); a body beyond the send window
waits for the server's WINDOW_UPDATE. A connection silent ``keepalive_seconds`` gets a PING
and is closed if silent as long again. After a GOAWAY a connection takes no new stream: the
streams above its last_stream_id fail, the others finish, later requests open a new one.
HPACK goes without Huffman coding (20 µs a request in pure Python, to save 30 bytes), and
fields that change per request (``unique``) stay out of its table.

Failures are classed as in ``app.providers.http``. Certainly not sent (``not_accepted``): no
connection, TLS refused or no ``h2``, no connection or free stream within
``connect_timeout_seconds``, the stream refused (REFUSED_STREAM) or above a GOAWAY's
last_stream_id, the connection lost before the request's frames were written. May have
sent: no answer within ``timeout_seconds``, another reset, the connection lost after.

Why not httpx with h2: against the local APNs peer (``tests.peers.apns``, own process, 64
requests in flight, uvloop, two cores) httpx 0.28 with ``http2=True`` made 900 to 950
requests/s at 1,050 to 1,100 µs of CPU each (httpcore's pool, a task, locks and awaits around
the same ``h2`` calls); this client makes 2,800 to 3,800/s at 110 to 155 µs, mostly ``h2``'s.
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
KEEPALIVE_SECONDS: Final = 60.0
CLOSE_SECONDS: Final = 1.0  # how long ``close`` waits for a TLS shutdown

Fields = Sequence[tuple[bytes, bytes]]
_CODES = errors.ErrorCodes
_SETTINGS: Final = {
    settings.SettingCodes.ENABLE_PUSH: 0,
    settings.SettingCodes.MAX_CONCURRENT_STREAMS: 0,
    settings.SettingCodes.MAX_HEADER_LIST_SIZE: http.MAX_ANSWER_BYTES,
}
# Our requests' fields are lowercase and well formed (adapters build them); h2's checks of
# them cost more than the rest of a request's frames. Answers are checked.
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
        if input_ is ConnectionInputs.RECV_GOAWAY:
            return []
        return super().process_input(input_)


class _Failed(Exception):
    """No answer: ``sent`` when the request may have reached the server."""

    def __init__(self, kind: str, *, sent: bool, detail: str = "") -> None:
        super().__init__(kind)
        self.kind, self.sent, self.detail = kind, sent, detail


class _Retry(Exception):  # the connection takes no new stream: the request goes elsewhere
    pass


class Response:
    """An answer (``status``, ``headers`` with lowercase names, ``body``) as it arrives."""

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

    def __init__(self, loop: asyncio.AbstractEventLoop, max_body: int, keepalive: float) -> None:
        self._loop, self._max_body, self._keepalive = loop, max_body, keepalive
        self._h2 = H2Connection(_CONFIG)
        self._h2.encoder, self._h2.state_machine = _Encoder(), _StateMachine()
        self._h2.local_settings = settings.Settings(client=True, initial_values=_SETTINGS)
        self._streams: dict[int, Response] = {}
        self._free = asyncio.Semaphore(0)  # streams the server allows beyond those open
        self._limit = self._owed = self._queued = 0  # owed: streams taken back (a lower limit)
        self._blocked: dict[int, memoryview] = {}  # bodies waiting for the send window
        self._writes = self._received = self._seen = 0
        self._flushing = self._pinged = self.usable = self._draining = False
        self._timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Future[None] = loop.create_future()

    async def exchange(self, fields: Fields, body: bytes, until: float, end: float) -> Response:
        """Send one request on a stream of this connection and await its answer."""
        if self._free.locked():
            self._queued += 1
            try:
                async with asyncio.timeout_at(until):
                    await self._free.acquire()
            except TimeoutError:
                raise _Failed("NoFreeStream", sent=False) from None
            finally:
                self._queued -= 1
        else:
            await self._free.acquire()
        try:
            if not self.usable:
                raise _Retry
            stream_id = self._h2.get_next_available_stream_id()
        except (_Retry, exceptions.NoAvailableStreamIDError):
            self._drain()  # and the next waiter learns it too
            raise _Retry from None
        self._h2.send_headers(stream_id, fields, end_stream=not body)
        stream = self._streams[stream_id] = Response(self._loop.create_future(), self._writes)
        if body:
            self._blocked[stream_id] = memoryview(body)
            self._send_blocked()
        self._schedule_flush()
        timer = self._loop.call_at(end, self._reset, stream_id, "ReadTimeout")
        try:
            return await stream.future
        finally:
            timer.cancel()
            if stream_id in self._streams:  # the caller gave up
                self._reset(stream_id, "Cancelled")

    def _send_blocked(self) -> None:
        """Send what the windows allow of the bodies waiting, in the order they came."""
        h2c = self._h2
        for stream_id, waiting in list(self._blocked.items()):
            rest = waiting
            while rest:
                room = min(h2c.local_flow_control_window(stream_id), h2c.max_outbound_frame_size)
                if room <= 0:
                    break
                h2c.send_data(stream_id, rest[:room].tobytes(), end_stream=len(rest) <= room)
                rest = rest[room:]
            if not rest:
                del self._blocked[stream_id]
                continue
            self._blocked[stream_id] = rest
            if h2c.outbound_flow_control_window <= 0:
                return

    def _schedule_flush(self) -> None:
        if not self._flushing:
            self._flushing = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        data, transport = self._h2.data_to_send(), self.transport
        if data and transport is not None and not transport.is_closing():
            transport.write(data)
            self._writes += 1

    def _finish(self, stream_id: int, error: BaseException | None) -> None:
        """The stream ended (``answer``) or failed (``error``): its slot is free again."""
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        if not stream.future.done():
            if error is None:
                stream.body = b"".join(stream.chunks)
                stream.future.set_result(stream)
            else:
                stream.future.set_exception(error)
        self._blocked.pop(stream_id, None)
        if self._owed:
            self._owed -= 1
        else:
            self._free.release()
        if self._draining and not self._streams and self.transport is not None:
            self.transport.close()

    def _reset(self, stream_id: int, kind: str) -> None:
        self._finish(stream_id, _Failed(kind, sent=True))
        with contextlib.suppress(exceptions.ProtocolError):
            self._h2.reset_stream(stream_id, _CODES.CANCEL)
        self._schedule_flush()

    def _drain(self) -> None:
        """Take no new stream (waiters go elsewhere); close once the open ones end."""
        self.usable, self._draining = False, True
        self._free.release()  # each woken waiter finds it unusable and wakes the next
        if not self._streams and self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        """Say GOAWAY and close (open streams fail as the connection goes)."""
        self.usable = False
        if self.transport is not None and not self.transport.is_closing():
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
            if self.transport is not None:
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
        if self._timer is not None:
            self._timer.cancel()
        for stream in self._streams.values():
            if not stream.future.done():
                left = self._writes > stream.batch
                stream.future.set_exception(_Failed("ConnectionLost", sent=left))
        self._streams.clear()
        self._blocked.clear()
        self._drain()
        if not self.lost.done():
            self.lost.set_result(None)

    def _on_response(self, event: Any) -> None:
        stream = self._streams.get(event.stream_id)
        if stream is None:
            return
        for name, value in event.headers:
            if name == b":status":
                stream.status = int(value)
            else:
                stream.headers[name.decode("latin-1")] = value.decode("latin-1")

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
        for _ in range(limit - self._limit):
            if self._owed:
                self._owed -= 1
            else:
                self._free.release()
        self._owed += max(0, self._limit - limit)
        self._limit = limit
        if self._blocked:
            self._send_blocked()

    def _on_goaway(self, event: Any) -> None:
        for stream_id in list(self._streams):
            if stream_id > event.last_stream_id:
                self._finish(stream_id, _Failed("GoAway", sent=False))
        if event.error_code != _CODES.NO_ERROR and self.transport is not None:
            self.transport.close()
        self._drain()

    def _tick(self) -> None:
        """Keepalive: PING after a silent interval; close after a second one."""
        if self.transport is None or self.transport.is_closing():
            return
        if self._received != self._seen:
            self._seen, self._pinged = self._received, False
        elif self._pinged:
            self.transport.abort()
            return
        else:
            self._h2.ping(b"clarion!")
            self._pinged = True
            self._flush()
        self._timer = self._loop.call_later(self._keepalive, self._tick)


class Client:
    """HTTP/2 connections to one server for one adapter (see the module documentation)."""

    keepalive_seconds = KEEPALIVE_SECONDS
    max_body_bytes = http.MAX_ANSWER_BYTES

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
                connection = self._pick() or await self._connected(until)
                try:
                    return await connection.exchange(request, body, until, end)
                except _Retry:
                    if loop.time() >= until:
                        raise _Failed("NoFreeStream", sent=False) from None
        except _Failed as failure:
            if failure.sent:
                text = f"{self.name}: no answer ({failure.kind}): it may have sent"
                raise ProviderError(ErrorClass.TRANSIENT, text) from None
            detail = f": {failure.detail}" if failure.detail else ""
            text = f"{self.name}: not sent ({failure.kind}{detail})"
            raise ProviderError(ErrorClass.TRANSIENT, text, not_accepted=True) from None

    def _pick(self) -> _Connection | None:
        """The least-loaded open connection; unless it is idle, the pool's next connection
        starts opening meanwhile (for later requests)."""
        best: _Connection | None = None
        empty = -1
        for index, task in enumerate(self._slots):
            connection = _opened(task)
            if connection is not None:
                if best is None or _load(connection) < _load(best):
                    best = connection
            elif empty < 0 and (task is None or task.done()):
                empty = index
        if empty >= 0 and (best is None or _load(best) > 0):
            self._slots[empty] = asyncio.get_running_loop().create_task(self._connect())
        return best

    async def _connected(self, until: float) -> _Connection:
        """The first connection of the pool to open, waited for until ``until``."""
        task = next(task for task in self._slots if task is not None and not task.done())
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
        except TimeoutError:
            connection.close()
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
            await asyncio.wait(
                [connection.lost for connection in connections], timeout=CLOSE_SECONDS
            )
        for connection in connections:
            if connection.transport is not None and not connection.lost.done():
                connection.transport.abort()


def _opened(task: asyncio.Task[_Connection] | None) -> _Connection | None:
    """The usable connection ``task`` opened, if any."""
    if task is None or not task.done() or task.cancelled() or task.exception() is not None:
        return None
    connection = task.result()
    return connection if connection.usable else None


def _load(connection: _Connection) -> int:
    return len(connection._streams) + connection._queued
