"""What the HTTP/2 peers (``apns``, ``fcm``, ``webpush``) share: a base that holds a peer's
certificate, counters and switched-on faults, and an HTTP/2 server over TLS that puts one on
the network.

The server speaks HTTP/2 itself (``h2``, server side, on asyncio) over TLS with ALPN ``h2``,
with a certificate for 127.0.0.1 and localhost (or the ``hosts`` a peer is made with) from a
``trustme`` CA (one per process; clients trust ``peer.ca.cert_pem``); the names clients ask for
by SNI are kept in ``server_names``. ``h2`` is strict: every frame and header block a client
writes is read by an implementation independent of Clarion's client, and one that breaks the
protocol loses its connection. ``tests.peers.http2_standalone`` serves the same peers on
another HTTP/2 implementation, in a process of their own, for benchmarks.

A peer (a subclass of ``Http2Peer``) gives ``handle(fields, body, fault)``: the answer to one
request, from its header fields (pseudo-headers included, names lowercase) and body.
Protocol-level behaviour is the server's, the same for every peer: ``max_streams`` is the
SETTINGS_MAX_CONCURRENT_STREAMS it announces (more breaks the connection), ``delay`` holds
every answer, ``goaway_after = n`` sends GOAWAY at a connection's n-th stream, answers the
streams up to it and closes; the faults ``HANG`` (hold the request until ``released``) and
``DROP`` (drop the connection) are played by the server, any other fault is handed to
``handle``; ``mute`` stops reading (a dead server). ``requests``, ``connections`` and
``max_open`` (most streams open at once) count. ``GET /_peer/stats`` answers ``stats()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
import trustme
from hyperframe.frame import GoAwayFrame

# The faults the server plays itself (the values of the peers' own Fault members).
HANG: Final = "hang"
DROP: Final = "drop"
HANG_SECONDS: Final = 30.0
STATS_PATH: Final = "/_peer/stats"

Fields = list[tuple[str, str]]
Reply = tuple[int, dict[str, str], bytes]
_CONFIG: Final = h2.config.H2Configuration(client_side=False, header_encoding=None)
# Every peer of a process has its certificate from this one authority.
_AUTHORITY: Final = trustme.CA()


class _Encoder(hpack.Encoder):  # Huffman coding would cost the peer 20 µs an answer
    def encode(self, headers: Any, huffman: bool = False) -> bytes:
        return super().encode(headers, huffman=False)


def json_reply(status: int, value: Any, **headers: str) -> Reply:
    return status, {"content-type": "application/json", **headers}, json.dumps(value).encode()


class Http2Peer:
    """A peer's certificate, counters and faults; subclasses give ``handle``."""

    # A request body beyond this is read and dropped (a peer checks sizes far below).
    max_body_bytes = 64 * 1024

    def __init__(
        self,
        *,
        max_streams: int = 1000,
        delay: float = 0.0,
        goaway_after: int = 0,
        hosts: Sequence[str] = ("127.0.0.1", "localhost"),
    ) -> None:
        self.max_streams = max_streams
        self.delay = delay
        self.goaway_after = goaway_after
        self.ca = _AUTHORITY
        self.certificate = self.ca.issue_cert(*hosts)
        self.server_names: list[str | None] = []
        # What the peer took, in the order it took it (the subclass says what an item is).
        self.accepted: list[Any] = []
        self.requests = 0
        self.connections = 0
        self.max_open = 0
        self.retry_after: str | None = None
        self._fault: str | None = None
        self._fault_times: int | None = None
        self.released = threading.Event()
        self.mute = False

    def tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.certificate.configure_cert(context)
        context.set_alpn_protocols(["h2"])
        context.sni_callback = lambda _socket, name, _context: self.server_names.append(name)
        return context

    def fail(self, fault: str, *, times: int | None = None, retry_after: str | None = None) -> None:
        """Answer the next ``times`` requests (all, if None) with ``fault``."""
        self._fault, self._fault_times, self.retry_after = fault, times, retry_after

    def heal(self) -> None:
        self._fault = None

    def take_fault(self) -> str | None:
        fault = self._fault
        if fault is not None and self._fault_times is not None:
            self._fault_times -= 1
            if self._fault_times <= 0:
                self._fault = None
        return fault

    def received(self, fields: Fields) -> str | None:
        """Count one request; the fault it meets (none for the stats call)."""
        self.requests += 1
        return None if (":path", STATS_PATH) in fields else self.take_fault()

    def stats(self) -> dict[str, int]:
        return {
            "accepted": len(self.accepted),
            "requests": self.requests,
            "connections": self.connections,
        }

    def reply(self, fields: Fields, body: bytes, fault: str | None) -> Reply:
        """The answer to one request: the stats, or what ``handle`` says."""
        if (":path", STATS_PATH) in fields and (":method", "GET") in fields:
            return json_reply(200, self.stats())
        return self.handle(fields, body, fault)

    def handle(self, fields: Fields, body: bytes, fault: str | None) -> Reply:
        """The answer to one request (``fault``: the switched-on fault it met, if any)."""
        raise NotImplementedError

    def hung_reply(self) -> Reply:
        """The answer to a request held by ``HANG``, once released."""
        return json_reply(500, {"error": "held until released"})


class _Server(asyncio.Protocol):
    """One client connection to a peer."""

    transport: asyncio.Transport

    def __init__(self, peer: Http2Peer, live: set[_Server]) -> None:
        self.peer, self.live = peer, live
        self.h2 = h2.connection.H2Connection(_CONFIG)
        self.h2.encoder = _Encoder()
        limit = {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: peer.max_streams}
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values=limit)
        self.streams: dict[int, tuple[Fields, bytearray]] = {}
        self.pending: set[int] = set()  # taken, not answered yet
        self.received = self.answered = 0
        self.last_stream: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer.connections += 1
        self.live.add(self)
        self.h2.initiate_connection()
        self._write()

    def data_received(self, data: bytes) -> None:
        if self.peer.mute:
            return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self._write()
            self.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._opened(event.stream_id or 0, event.headers or [])
            elif isinstance(event, h2.events.DataReceived):
                stream_id = event.stream_id or 0
                self.h2.acknowledge_received_data(event.flow_controlled_length or 0, stream_id)
                stream = self.streams.get(stream_id)
                if stream is not None and len(stream[1]) <= self.peer.max_body_bytes:
                    stream[1].extend(event.data or b"")
            elif isinstance(event, h2.events.StreamEnded):
                self._request(event.stream_id or 0)
            elif isinstance(event, h2.events.StreamReset):
                self.streams.pop(event.stream_id or 0, None)
                self.pending.discard(event.stream_id or 0)
        self._write()

    def _opened(self, stream_id: int, headers: Any) -> None:
        if self.last_stream is not None and stream_id > self.last_stream:
            return  # after GOAWAY: not processed
        fields = [(bytes(k).decode(), bytes(v).decode()) for k, v in headers]
        self.streams[stream_id] = (fields, bytearray())
        self.pending.add(stream_id)
        self.peer.max_open = max(self.peer.max_open, len(self.pending))
        self.received += 1
        if self.received == self.peer.goaway_after:
            self.last_stream = stream_id
            self._write()
            frame = GoAwayFrame(0)
            frame.last_stream_id = stream_id
            self.transport.write(frame.serialize())

    def _request(self, stream_id: int) -> None:
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return
        fault = self.peer.received(stream[0])
        loop = asyncio.get_running_loop()
        if fault == DROP:
            self.transport.abort()
        elif fault == HANG:
            loop.run_in_executor(None, self.peer.released.wait, HANG_SECONDS).add_done_callback(
                lambda _: self._answer(stream_id, self.peer.hung_reply())
            )
        else:
            reply = self.peer.reply(stream[0], bytes(stream[1]), fault)
            if self.peer.delay:
                loop.call_later(self.peer.delay, self._answer, stream_id, reply)
            else:
                self._answer(stream_id, reply, flush=False)

    def _answer(self, stream_id: int, reply: Reply, *, flush: bool = True) -> None:
        if stream_id not in self.pending or self.transport.is_closing():
            return
        self.pending.discard(stream_id)
        status, headers, body = reply
        fields = [(":status", str(status)), *headers.items()]
        with contextlib.suppress(h2.exceptions.ProtocolError):  # the client reset it
            self.h2.send_headers(stream_id, fields, end_stream=not body)
            if body:
                self.h2.send_data(stream_id, body, end_stream=True)
        self.answered += 1
        if flush or self.answered % 8 == 0:  # a batch goes out in parts, as servers answer
            self._write()
        if self.last_stream is not None and not self.pending:
            self._write()
            self.close()

    def _write(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.live.discard(self)


@dataclass(frozen=True)
class Served:
    """A running peer's address."""

    port: int

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


@contextlib.contextmanager
def serve(peer: Http2Peer) -> Iterator[Served]:
    """Serve ``peer`` on a free port of 127.0.0.1 in a thread of its own; stop it after. One
    peer may be served on several ports at once (one state behind two hosts)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    live: set[_Server] = set()
    factory = functools.partial(_Server, peer, live)
    listening = loop.create_server(factory, "127.0.0.1", 0, ssl=peer.tls())
    server = asyncio.run_coroutine_threadsafe(listening, loop).result(10)
    try:
        yield Served(server.sockets[0].getsockname()[1])
    finally:
        peer.released.set()
        asyncio.run_coroutine_threadsafe(_stop(server, live), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _stop(server: asyncio.Server, live: set[_Server]) -> None:
    server.close()
    for connection in list(live):
        connection.close()
    await asyncio.sleep(0.05)
    for connection in list(live):
        connection.transport.abort()
    await server.wait_closed()
    await asyncio.get_running_loop().shutdown_default_executor()
