"""One HTTP/2 connection of the push client against an ``h2`` server in memory: bodies leave
within the server's windows, in the order they came, and wait for its WINDOW_UPDATEs; a body
the server answered before it was all sent goes no further and its stream is reset; answers
beyond the connection's first window keep coming; a header block over a frame continues in
CONTINUATION frames; the streams open never exceed the server's
SETTINGS_MAX_CONCURRENT_STREAMS, lowered or raised; after a GOAWAY the streams up to its last
stream id are still answered, those above fail as not sent and no new stream opens; ``h2``'s
table of streams does not grow with the requests made; a request given up while the
connection closes is cancelled, and a server that breaks the protocol gets a GOAWAY naming
the error."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.events
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import GoAwayFrame

from app.providers.http2_connection import Connection, Failed, Response


class Pipe:
    """The transport between the client and the server in memory."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close


class Server:
    """An h2 server and the client connected to it; ``turn`` moves the bytes both ways."""

    def __init__(self, **settings: int) -> None:
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.h2.initiate_connection()
        self.h2.update_settings({getattr(SettingCodes, k.upper()): v for k, v in settings.items()})
        self.pipe = Pipe()
        self.client = Connection(asyncio.get_running_loop(), 1 << 16, 60.0)
        self.client.connection_made(self.pipe)  # type: ignore[arg-type]
        self.bodies: dict[int, bytearray] = {}
        self.ended: list[int] = []
        self.resets: list[int] = []
        self.acknowledge = True

    async def turn(self) -> None:
        for _ in range(3):
            await asyncio.sleep(0)  # the client's write of its loop turn
            sent, self.pipe.written = bytes(self.pipe.written), bytearray()
            for event in self.h2.receive_data(sent) if sent else []:
                if isinstance(event, h2.events.DataReceived):
                    self.bodies.setdefault(event.stream_id, bytearray()).extend(event.data)
                    if self.acknowledge:
                        size = event.flow_controlled_length
                        self.h2.acknowledge_received_data(size, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    self.ended.append(event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    self.resets.append(event.stream_id)
            answer = self.h2.data_to_send()
            if answer:
                self.client.data_received(answer)

    def answer(self, stream_id: int, body: bytes = b"ok") -> None:
        self.h2.send_headers(stream_id, [(":status", "200")])
        for at in range(0, len(body), 16_384):
            last = at + 16_384 >= len(body)
            self.h2.send_data(stream_id, body[at : at + 16_384], end_stream=last)
        if not body:
            self.h2.end_stream(stream_id)

    def request(self, body: bytes) -> asyncio.Task[Response]:
        loop = asyncio.get_running_loop()
        end = loop.time() + 5
        fields = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"push.test")]
        fields.append((b":path", b"/"))
        return loop.create_task(self.client.exchange(fields, body, end, end))


async def test_bodies_wait_for_the_server_s_windows_and_leave_in_order() -> None:
    server = Server(initial_window_size=1000)
    await server.turn()
    server.acknowledge = False  # the connection's window (65,535) closes within the 12th body
    bodies = [bytes([n]) * 5000 for n in range(20)]
    requests = [server.request(body) for body in bodies]
    await server.turn()
    assert {len(got) for got in server.bodies.values()} == {1000}  # each stream's window
    for stream_id in server.bodies:
        server.h2.increment_flow_control_window(100_000, stream_id)
    await server.turn()
    assert sum(map(len, server.bodies.values())) == 65_535
    # In the order they came: the first 11 whole, the 12th up to the connection's window.
    assert [len(server.bodies[1 + 2 * n]) for n in range(20)] == [5000] * 11 + [2535] + [1000] * 8
    server.acknowledge = True
    server.h2.increment_flow_control_window(100_000)
    await server.turn()
    assert server.ended == [1 + 2 * n for n in range(20)]
    for stream_id in server.ended:
        server.answer(stream_id)
    await server.turn()
    assert [(await request).body for request in requests] == [b"ok"] * 20
    assert [bytes(server.bodies[1 + 2 * n]) for n in range(20)] == bodies


async def test_streams_stay_within_the_server_s_limit_as_it_changes() -> None:
    server = Server(max_concurrent_streams=2)
    await server.turn()
    requests = [server.request(b"") for _ in range(6)]
    await server.turn()
    assert server.ended == [1, 3]
    server.h2.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: 1})
    server.answer(1)
    await server.turn()
    assert server.ended == [1, 3]  # 3 still open: the limit of 1 is reached
    server.h2.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: 3})
    server.answer(3)
    await server.turn()
    assert server.ended == [1, 3, 5, 7, 9]
    for stream_id in (5, 7, 9):
        server.answer(stream_id)
    await server.turn()
    assert server.ended[-1] == 11
    server.answer(11)
    await server.turn()
    assert [(await request).status for request in requests] == [200] * 6


async def test_after_a_goaway_the_streams_below_its_last_id_are_still_answered() -> None:
    server = Server()
    await server.turn()
    requests = [server.request(b"x") for _ in range(3)]
    await server.turn()
    server.client.data_received(GoAwayFrame(0, last_stream_id=3).serialize())
    server.answer(1)
    server.answer(3, b"late")
    await server.turn()
    assert [(await request).body for request in requests[:2]] == [b"ok", b"late"]
    failure: Any = requests[2].exception()
    assert isinstance(failure, Failed)
    assert (failure.kind, failure.sent) == ("GoAway", False)
    assert not server.client.usable
    assert server.pipe.closing


async def test_h2_s_table_of_streams_does_not_grow_with_the_requests() -> None:
    server = Server()
    await server.turn()
    for _ in range(10):
        requests = [server.request(b"") for _ in range(50)]
        await server.turn()
        while server.ended:
            server.answer(server.ended.pop())
        await server.turn()
        assert {(await request).status for request in requests} == {200}
    assert len(server.client._h2.streams) <= 2 * 50 + 64
    assert server.client._h2.open_outbound_streams == 0


async def test_a_request_given_up_while_its_connection_closes_is_cancelled_as_asked() -> None:
    server = Server()
    await server.turn()
    request = server.request(b"x")
    await server.turn()
    server.client.close()  # h2 sent its GOAWAY: it resets no stream any more
    request.cancel()
    failure = await asyncio.gather(request, return_exceptions=True)
    assert isinstance(failure[0], asyncio.CancelledError)


async def test_a_server_that_breaks_the_protocol_loses_the_connection() -> None:
    server = Server()
    await server.turn()
    request = server.request(b"x")
    await server.turn()
    server.client.data_received(b"\x00\x00\x01\x04\x00\x00\x00\x00\x00\x00")  # SETTINGS, 1 byte
    assert server.pipe.closing
    goaway = server.h2.receive_data(bytes(server.pipe.written))
    assert [type(event) for event in goaway] == [h2.events.ConnectionTerminated]
    assert goaway[0].error_code == ErrorCodes.FRAME_SIZE_ERROR  # type: ignore[attr-defined]
    server.client.connection_lost(None)
    failure: Any = await asyncio.gather(request, return_exceptions=True)
    assert isinstance(failure[0], Failed)
    assert failure[0].kind == "ConnectionLost"


async def test_a_header_block_over_a_frame_continues_in_continuation_frames() -> None:
    server = Server()
    await server.turn()
    loop = asyncio.get_running_loop()
    fields = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"push.test")]
    fields += [(b":path", b"/"), (b"x-long", b"v" * 40_000)]
    end = loop.time() + 5
    request = loop.create_task(server.client.exchange(fields, b"", end, end))
    for _ in range(3):
        await asyncio.sleep(0)  # the request, then its write
    frames = bytes(server.pipe.written)
    kinds = []
    while frames:
        length, kind = int.from_bytes(frames[:3], "big"), frames[3]
        kinds.append(kind)
        frames = frames[9 + length :]
    assert kinds == [0x1, 0x9, 0x9]  # HEADERS, CONTINUATION, CONTINUATION
    await server.turn()
    assert server.ended == [1]
    server.answer(1)
    await server.turn()
    assert (await request).status == 200


async def test_a_body_the_server_answered_before_it_was_sent_is_not_sent_further() -> None:
    server = Server(initial_window_size=1000)
    await server.turn()
    server.acknowledge = False
    request = server.request(b"x" * 5000)
    await server.turn()
    assert len(server.bodies[1]) == 1000
    server.answer(1, b"early")
    await server.turn()
    assert (await request).body == b"early"
    assert server.resets == [1]  # CANCEL: the rest of the body will not come
    assert len(server.bodies[1]) == 1000
    assert not server.client._bodies


async def test_answers_beyond_the_connection_s_window_keep_coming() -> None:
    # 300 answers of 60,000 bytes: more than the 16 MiB the connection announced at first.
    server = Server()
    await server.turn()
    for _ in range(30):
        requests = [server.request(b"") for _ in range(10)]
        await server.turn()
        while server.ended:
            server.answer(server.ended.pop(), b"a" * 60_000)
        await server.turn()
        assert {len((await request).body) for request in requests} == {60_000}
    assert server.h2.outbound_flow_control_window > 8 << 20
