"""One HTTP/2 connection of the push client (``app.providers.http2``): ``h2``'s client state
machine (as ``app.providers.http2_machine`` configures it) under an asyncio protocol of ours.
``h2`` frames, encodes and decodes header blocks, keeps the flow-control windows, answers
PINGs and SETTINGS and checks what the server sends; this module keeps the requests: the
streams they wait for, their bodies waiting for a window, their answers, the writes (one per
loop turn for every request of that turn) and the keepalive."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Final, cast

import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from app.providers.http2_machine import H2Client

MAX_STREAMS: Final = 1000
LAST_STREAM_ID: Final = 2**31 - 3  # then a connection is used up
KEEPALIVE_SECONDS: Final = 60.0
RECEIVE_WINDOW: Final = 16 << 20  # what all answers of a connection may send us unacknowledged
DEFAULT_WINDOW: Final = 65_535

Fields = Sequence[tuple[bytes, bytes]]


class Failed(Exception):  # no answer; ``sent``: the request may have reached the server
    def __init__(self, kind: str, *, sent: bool, detail: str = "") -> None:
        super().__init__(kind)
        self.kind, self.sent, self.detail = kind, sent, detail


class Retry(Exception):
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


class Connection(asyncio.Protocol):
    """One HTTP/2 connection: its streams, the requests waiting for one, its keepalive."""

    transport: asyncio.Transport  # from ``connection_made`` on
    _timer: asyncio.TimerHandle

    def __init__(self, loop: asyncio.AbstractEventLoop, max_body: int, keepalive: float) -> None:
        self._loop, self._max_body, self._keepalive = loop, max_body, keepalive
        self._h2 = H2Client()
        self._streams: dict[int, Response] = {}
        self._bodies: dict[int, memoryview] = {}  # unsent request bodies, in the order they came
        self._next_id = 1
        self._waiting: deque[asyncio.Future[None]] = deque()  # requests waiting for a stream
        self._limit = 0  # streams open at once: none before the server's SETTINGS
        self._server_limit = MAX_STREAMS  # unlimited until its SETTINGS say otherwise
        self._writes = self._received = self._seen = 0
        self._flushing = self._pinged = self.usable = self._draining = False
        self.lost: asyncio.Future[None] = loop.create_future()
        self._handlers = {
            h2.events.ResponseReceived: self._on_response,
            h2.events.DataReceived: self._on_data,
            h2.events.StreamEnded: self._on_end,
            h2.events.StreamReset: self._on_reset,
            h2.events.RemoteSettingsChanged: self._on_settings,
            h2.events.WindowUpdated: self._on_window_update,
            h2.events.ConnectionTerminated: self._on_goaway,
        }

    async def exchange(self, fields: Fields, body: bytes, until: float, end: float) -> Response:
        """Send one request on a stream of this connection and await its answer."""
        if self._waiting or len(self._streams) >= self._limit:
            await self._stream(until)
        if not self.usable or self._next_id > LAST_STREAM_ID:
            self._drain()
            raise Retry
        stream_id, self._next_id = self._next_id, self._next_id + 2
        try:
            self._h2.send_headers(stream_id, fields, end_stream=not body)
        except h2.exceptions.ProtocolError:  # h2 takes no new stream (a connection ending)
            self._drain()
            raise Retry from None
        stream = Response(self._loop.create_future(), self._writes)
        self._streams[stream_id] = stream
        self._h2.open = len(self._streams)
        if body:
            self._bodies[stream_id] = memoryview(body)
            self._send_bodies()
        self._schedule_flush()
        timer = self._loop.call_at(end, self._reset, stream_id, "ReadTimeout")
        try:
            return await stream.future
        finally:
            timer.cancel()
            if stream_id in self._streams:  # the caller gave up
                self._reset(stream_id, "Cancelled")

    async def _stream(self, until: float) -> None:
        """Wait until the server allows one more stream or the connection takes no new one
        (first come, first served); ``TimeoutError`` at ``until``."""
        behind = bool(self._waiting)  # those waiting already go first
        while self.usable and (behind or len(self._streams) >= self._limit):
            behind = False
            waiter = self._loop.create_future()
            self._waiting.append(waiter)
            try:
                async with asyncio.timeout_at(until):
                    await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken and gone: the next one takes its place
                else:
                    self._waiting.remove(waiter)
                raise

    def _wake(self) -> None:
        """Wake as many waiting requests as streams are free (all when none will be)."""
        free = self._limit - len(self._streams) if self.usable else len(self._waiting)
        while free > 0 and self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def _send_bodies(self) -> None:
        """Send what the windows let out, in the order the bodies came. A body whose stream
        has no window left lets later ones pass; a closed connection window stops them all."""
        connection = self._h2
        frame_size = connection.max_outbound_frame_size
        for stream_id, waiting in list(self._bodies.items()):
            body = waiting
            while body:
                size = min(len(body), connection.local_flow_control_window(stream_id))
                if size <= 0:
                    break
                size = min(size, frame_size)
                chunk, body = body[:size], body[size:]
                connection.send_data(stream_id, chunk.tobytes(), end_stream=not body)
            if not body:
                del self._bodies[stream_id]
                continue
            self._bodies[stream_id] = body
            if connection.outbound_flow_control_window <= 0:
                return

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
        self._h2.open = len(self._streams)
        if not stream.future.done() and error is not None:
            stream.future.set_exception(error)
        elif not stream.future.done():
            stream.body = b"".join(stream.chunks)
            stream.future.set_result(stream)
        if self._bodies.pop(stream_id, None) is not None:  # answered before its body left
            self._cancel(stream_id)
        if self._waiting:
            self._wake()
        if self._draining and not self._streams:
            self.transport.close()

    def _cancel(self, stream_id: int) -> None:
        try:
            self._h2.reset_stream(stream_id, ErrorCodes.CANCEL)
        except h2.exceptions.ProtocolError:
            return  # the stream is over on both sides, or the connection is ending
        self._schedule_flush()

    def _reset(self, stream_id: int, kind: str) -> None:
        if stream_id in self._streams:
            self._bodies.pop(stream_id, None)
            self._finish(stream_id, Failed(kind, sent=True))
            self._cancel(stream_id)

    def _drain(self) -> None:  # take no new stream; close once the open ones end
        self.usable, self._draining = False, True
        self._wake()  # every waiting request: each finds the connection unusable
        if not self._streams:
            self.transport.close()

    def close(self) -> None:  # open streams fail as the connection goes
        self.usable = False
        if not self.transport.is_closing():
            self._h2.close_connection()
            self._flush()
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.usable = True  # requests wait for the server's SETTINGS
        self._timer = self._loop.call_later(self._keepalive, self._tick)
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(RECEIVE_WINDOW - DEFAULT_WINDOW)
        self._flush()

    def data_received(self, data: bytes) -> None:
        self._received += 1
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError:  # h2 queued a GOAWAY naming the error
            self.usable = False
            self._flush()
            self.transport.abort()
            return
        handlers = self._handlers
        for event in events:
            handler = handlers.get(type(event))
            if handler is not None:
                handler(event)  # type: ignore[operator]
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        for stream in self._streams.values():
            if not stream.future.done():
                left = self._writes > stream.batch
                stream.future.set_exception(Failed("ConnectionLost", sent=left))
        self._streams = {}
        self._bodies.clear()
        self._drain()
        if not self.lost.done():
            self.lost.set_result(None)

    def _on_response(self, event: h2.events.ResponseReceived) -> None:
        stream = self._streams.get(event.stream_id)
        if stream is None:
            return
        headers = {}
        for name, value in event.headers:
            headers[name.decode("latin-1")] = value.decode("latin-1")
        status = headers.pop(":status", "")
        if len(status) != 3 or not status.isdigit():
            self._reset(event.stream_id, "BadAnswer")
            return
        stream.status, stream.headers = int(status), headers

    def _on_data(self, event: h2.events.DataReceived) -> None:
        stream_id = event.stream_id
        # Acknowledged at once: answers are bounded by ``max_body`` and their stream's window.
        self._h2.acknowledge_received_data(event.flow_controlled_length, stream_id)
        stream = self._streams.get(stream_id)
        if stream is None or not event.data:
            return  # reset by this client, or over: the window counted it all the same
        stream.size += len(event.data)
        stream.chunks.append(event.data)
        if stream.size > self._max_body:
            self._reset(stream_id, "AnswerTooLarge")

    def _on_end(self, event: h2.events.StreamEnded) -> None:
        self._finish(event.stream_id, None)

    def _on_reset(self, event: h2.events.StreamReset) -> None:
        sent = event.error_code != ErrorCodes.REFUSED_STREAM
        self._bodies.pop(event.stream_id, None)
        failure = Failed("StreamReset" if sent else "RefusedStream", sent=sent)
        self._finish(event.stream_id, failure)

    def _on_settings(self, event: h2.events.RemoteSettingsChanged) -> None:
        changed = event.changed_settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)
        if changed is not None:
            self._server_limit = changed.new_value
        self._limit = min(self._server_limit, MAX_STREAMS)
        self._wake()
        self._send_bodies()

    def _on_window_update(self, event: h2.events.WindowUpdated) -> None:
        if self._bodies:
            self._send_bodies()

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> None:
        last = event.last_stream_id or 0
        for stream_id in list(self._streams):
            if stream_id > last:
                self._finish(stream_id, Failed("GoAway", sent=False))
        if event.error_code != ErrorCodes.NO_ERROR:
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
