"""One HTTP/2 connection of the APNs and FCM client (``app.providers.http2``): its streams, the
requests waiting for one, flow control, the frames it reads, its keepalive."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final, cast

import hpack

from app.providers.http2_window import ReceiveWindow, SendQueue
from app.providers.http2_wire import (
    ACK,
    END_HEADERS,
    END_STREAM,
    MAX_MAX_FRAME,
    MAX_WINDOW,
    MIN_MAX_FRAME,
    PREFACE,
    ErrorCode,
    FrameType,
    ProtocolError,
    Setting,
    frame,
    frame_header,
    goaway,
    header_block,
    headers_frames,
    read_settings,
    rst_stream,
    settings,
    two_words,
    unpadded,
    window_update,
    word,
)

MAX_STREAMS: Final = 1000
LAST_STREAM_ID: Final = 2**31 - 3  # then a connection is used up
KEEPALIVE_SECONDS: Final = 60.0
STREAM_WINDOW: Final = 1 << 20  # what one answer may send us
MAX_HEADER_LIST: Final = 64 * 1024
MAX_DECODED_BLOCKS: Final = 64

Fields = Sequence[tuple[bytes, bytes]]
# What the client tells the server first: no server push, the stream window above.
_OPENING: Final = PREFACE + settings(
    [
        (Setting.ENABLE_PUSH, 0),
        (Setting.INITIAL_WINDOW_SIZE, STREAM_WINDOW),
        (Setting.MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST),
    ]
)


class Failed(Exception):  # no answer; ``sent``: the request may have reached the server
    def __init__(self, kind: str, *, sent: bool, detail: str = "") -> None:
        super().__init__(kind)
        self.kind, self.sent, self.detail = kind, sent, detail


class Retry(Exception):
    """The connection takes no new stream: the request goes to another."""


class Response:
    """An answer: ``status``, ``headers`` (lowercase names) and ``body``."""

    __slots__ = ("batch", "body", "chunks", "future", "headers", "size", "status", "window")

    def __init__(self, future: asyncio.Future[Response], batch: int, window: int) -> None:
        self.future = future
        self.batch = batch  # the connection's writes when queued: its frames left once more
        self.window = window  # what the server lets this stream send now
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
        self._streams: dict[int, Response] = {}
        self._next_id = 1
        self._free = asyncio.Semaphore(0)  # streams the server allows beyond those open
        self._limit = self._owed = 0  # owed: streams to take back (the limit was lowered)
        self._server_limit = MAX_STREAMS  # unlimited until its SETTINGS say otherwise
        self._initial_window, self._max_frame = 65_535, MIN_MAX_FRAME
        self._bodies = SendQueue()
        self._received_data = ReceiveWindow()
        self._decoder = hpack.Decoder(max_header_list_size=MAX_HEADER_LIST)
        self._decoded: dict[bytes, tuple[str, dict[str, str]]] = {}  # see ``_decode``
        self._input = bytearray()
        self._output: list[bytes] = []
        self._continued: tuple[int, int, bytearray] | None = None  # a header block's start
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
        if not self.usable or self._next_id > LAST_STREAM_ID:
            self._drain()  # and the next waiter learns it too
            raise Retry
        stream_id, self._next_id = self._next_id, self._next_id + 2
        block = header_block(fields)
        self._output.append(headers_frames(stream_id, block, not body, self._max_frame))
        stream = Response(self._loop.create_future(), self._writes, self._initial_window)
        self._streams[stream_id] = stream
        if body:
            self._bodies.add(stream_id, body)
            self._send_bodies()
        self._schedule_flush()
        timer = self._loop.call_at(end, self._reset, stream_id, "ReadTimeout")
        try:
            return await stream.future
        finally:
            timer.cancel()
            if stream_id in self._streams:  # the caller gave up
                self._reset(stream_id, "Cancelled")

    def _send_bodies(self) -> None:
        for stream_id, chunk, last in self._bodies.sendable(self._streams, self._max_frame):
            self._output.append(frame(FrameType.DATA, END_STREAM if last else 0, stream_id, chunk))

    def _schedule_flush(self) -> None:
        if not self._flushing:
            self._flushing = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        if self._output and not self.transport.is_closing():
            self.transport.write(b"".join(self._output))
            self._writes += 1
        self._output.clear()

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
        if self._bodies.drop(stream_id):  # answered before its body was sent: end our side
            self._output.append(rst_stream(stream_id, ErrorCode.CANCEL))
            self._schedule_flush()
        if self._owed:
            self._owed -= 1
        else:
            self._free.release()
        if self._draining and not self._streams:
            self.transport.close()

    def _reset(self, stream_id: int, kind: str) -> None:
        if stream_id in self._streams:
            self._bodies.drop(stream_id)
            self._finish(stream_id, Failed(kind, sent=True))
            self._output.append(rst_stream(stream_id, ErrorCode.CANCEL))
            self._schedule_flush()

    def _drain(self) -> None:  # take no new stream; close once the open ones end
        self.usable, self._draining = False, True
        self._free.release()  # each woken waiter finds it unusable and wakes the next
        if not self._streams:
            self.transport.close()

    def close(self) -> None:  # open streams fail as the connection goes
        self.usable = False
        if not self.transport.is_closing():
            self._output.append(goaway(0, ErrorCode.NO_ERROR))
            self._flush()
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.usable = True  # requests wait for the server's SETTINGS on ``_free``
        self._timer = self._loop.call_later(self._keepalive, self._tick)
        self._output += [_OPENING, window_update(0, self._received_data.opening_increment)]
        self._flush()

    def data_received(self, data: bytes) -> None:
        self._received += 1
        buffer = self._input
        buffer += data
        offset, end = 0, len(buffer)
        try:
            while end - offset >= 9:
                length, kind, flags, stream_id = frame_header(buffer, offset)
                if length > MIN_MAX_FRAME:  # the largest frame this client allows
                    raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "a frame over 16 KB")
                if end - offset - 9 < length:
                    break
                payload = bytes(buffer[offset + 9 : offset + 9 + length])
                offset += 9 + length
                self._on_frame(kind, flags, stream_id, payload)
        except ProtocolError as error:
            self._output.append(goaway(0, error.code))
            self._flush()
            self.transport.abort()
            return
        del buffer[:offset]
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

    def _on_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continued is not None and kind != FrameType.CONTINUATION:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a header block was interrupted")
        if kind == FrameType.DATA:
            self._on_data(flags, stream_id, payload)
        elif kind == FrameType.HEADERS:
            self._on_header_part(stream_id, flags, unpadded(flags, payload, priority=True), flags)
        elif kind == FrameType.CONTINUATION:
            if self._continued is None or self._continued[0] != stream_id:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a CONTINUATION out of place")
            self._on_header_part(stream_id, self._continued[1], payload, flags)
        elif kind == FrameType.RST_STREAM:
            code = word(payload)
            sent = code != ErrorCode.REFUSED_STREAM
            self._bodies.drop(stream_id)
            failure = Failed("StreamReset" if sent else "RefusedStream", sent=sent)
            self._finish(stream_id, failure)
        elif kind == FrameType.SETTINGS and not flags & ACK:
            self._on_settings(payload)
        elif kind == FrameType.PING and not flags & ACK:
            self._output.append(frame(FrameType.PING, ACK, 0, payload))
        elif kind == FrameType.GOAWAY:
            self._on_goaway(*two_words(payload))
        elif kind == FrameType.WINDOW_UPDATE:
            self._on_window_update(stream_id, word(payload))
        elif kind == FrameType.PUSH_PROMISE:  # this client announced ENABLE_PUSH 0
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a PUSH_PROMISE")

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        increment = self._received_data.took(len(payload))
        if increment:
            self._output.append(window_update(0, increment))
        stream = self._streams.get(stream_id)
        if stream is None:
            return  # reset by this client, or over: the window counted it all the same
        data = unpadded(flags, payload)
        if data:
            stream.size += len(data)
            stream.chunks.append(data)
            if stream.size > self._max_body:
                self._reset(stream_id, "AnswerTooLarge")
                return
        if flags & END_STREAM:
            self._finish(stream_id, None)

    def _on_header_part(self, stream_id: int, flags: int, part: bytes, last_flags: int) -> None:
        """A HEADERS payload or a CONTINUATION (``flags``: the HEADERS frame's own)."""
        if not last_flags & END_HEADERS:
            block = self._continued[2] if self._continued else bytearray()
            block += part
            self._continued = (stream_id, flags, block)
            return
        if self._continued is not None:
            part, self._continued = bytes(self._continued[2] + part), None
        # Decoded even for a stream that is over: the table must follow the server.
        status, headers = self._decoded.get(part) or self._decode(part)
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        if not stream.status:  # not trailers
            if len(status) != 3 or not status.isdigit():
                self._reset(stream_id, "BadAnswer")
                return
            if status[0] == "1":
                return  # informational: the answer follows
            stream.status, stream.headers = int(status), dict(headers)
        if flags & END_STREAM:
            self._finish(stream_id, None)

    def _decode(self, block: bytes) -> tuple[str, dict[str, str]]:
        """A header block's ``:status`` and other fields, remembered while the decoding table
        stays as it is: a server answers alike again and again (the same block while it
        indexes nothing new), and decoding one cost 20 µs, a fifth of a request."""
        table = self._decoder.header_table.dynamic_entries
        before = (len(table), table[0] if table else None)
        try:
            fields = self._decoder.decode(block, raw=True)
        except hpack.HPACKError:
            raise ProtocolError(ErrorCode.COMPRESSION_ERROR, "a header block") from None
        headers = {bytes(k).decode("latin-1"): bytes(v).decode("latin-1") for k, v in fields}
        answer = headers.pop(":status", ""), headers
        # An entry added (a new newest) or evicted changes what later blocks' indices mean.
        if len(table) != before[0] or (table[0] if table else None) is not before[1]:
            self._decoded.clear()
        elif len(self._decoded) < MAX_DECODED_BLOCKS:
            self._decoded[block] = answer
        return answer

    def _on_settings(self, payload: bytes) -> None:
        for identifier, value in read_settings(payload):
            if identifier == Setting.MAX_CONCURRENT_STREAMS:
                self._server_limit = value
            elif identifier == Setting.INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "a window over 2^31-1")
                for stream in self._streams.values():
                    stream.window += value - self._initial_window
                self._initial_window = value
            elif identifier == Setting.MAX_FRAME_SIZE:
                if not MIN_MAX_FRAME <= value <= MAX_MAX_FRAME:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a frame size out of range")
                self._max_frame = value
        self._output.append(frame(FrameType.SETTINGS, ACK, 0))
        limit = min(self._server_limit, MAX_STREAMS)
        self._owed, self._limit = self._owed - (limit - self._limit), limit
        for _ in range(-self._owed):
            self._free.release()
        self._owed = max(self._owed, 0)
        self._send_bodies()

    def _on_window_update(self, stream_id: int, increment: int) -> None:
        if stream_id == 0:
            self._bodies.window += increment
        elif stream_id in self._streams:
            self._streams[stream_id].window += increment
        self._send_bodies()

    def _on_goaway(self, last_stream_id: int, code: int) -> None:
        for stream_id in list(self._streams):
            if stream_id > last_stream_id:
                self._finish(stream_id, Failed("GoAway", sent=False))
        if code != ErrorCode.NO_ERROR:
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
            self._output.append(frame(FrameType.PING, 0, 0, b"clarion!"))
            self._flush()
        self._seen = self._received
        self._timer = self._loop.call_later(self._keepalive, self._tick)
