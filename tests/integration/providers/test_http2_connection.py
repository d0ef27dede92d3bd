"""One HTTP/2 connection of the APNs client against scripted servers on ``h2`` (TLS, ALPN
h2): answers the way servers may shape them (an informational answer first, padding, a
header block in CONTINUATION frames, trailers) are read whole; a header block read before is
not taken for what it meant then once the server's table changed; a body larger than the
server's stream window waits for its WINDOW_UPDATEs; a refused stream was not sent; a server
that breaks the protocol gets a GOAWAY naming the error and the request fails as a lost
connection."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
import trustme
from h2.errors import ErrorCodes as ErrorCode
from hyperframe.frame import PushPromiseFrame

from app.catalog.providers import ProviderLimits
from app.providers.base import ProviderError
from app.providers.http2 import Client

Script = Callable[["Scripted", int, bytes], None]
_AUTHORITY = trustme.CA()
_CERTIFICATE = _AUTHORITY.issue_cert("127.0.0.1")


class Scripted(asyncio.Protocol):
    """An HTTP/2 server that answers each request as its script says."""

    def __init__(self, script: Script, settings: dict[int, int], log: list[Any]) -> None:
        self.script, self.log = script, log
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values=settings)
        self.bodies: dict[int, bytearray] = {}

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.h2.initiate_connection()
        self.transport.write(self.h2.data_to_send())

    def data_received(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                self.bodies.setdefault(event.stream_id, bytearray()).extend(event.data)
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.log.append(bytes(self.bodies.pop(event.stream_id, b"")))
                self.script(self, event.stream_id, self.log[-1])
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.log.append(ErrorCode(event.error_code))
        if not self.transport.is_closing():
            self.transport.write(self.h2.data_to_send())


@pytest.fixture
def ca_file(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    _AUTHORITY.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
async def server(ca_file: str) -> AsyncIterator[Callable[..., Any]]:
    """``await server(script, **settings)``: a Client of a scripted server, and its log."""
    opened: list[tuple[asyncio.Server, Client]] = []

    async def start(script: Script, **settings: int) -> tuple[Client, list[Any]]:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        _CERTIFICATE.configure_cert(tls)
        tls.set_alpn_protocols(["h2"])
        log: list[Any] = []
        codes = {getattr(h2.settings.SettingCodes, k.upper()): v for k, v in settings.items()}
        listening = await asyncio.get_running_loop().create_server(
            lambda: Scripted(script, codes, log), "127.0.0.1", 0, ssl=tls
        )
        port = listening.sockets[0].getsockname()[1]
        limits = ProviderLimits(timeout_seconds=3.0, connect_timeout_seconds=1.0)
        client = Client("apns", limits, f"https://127.0.0.1:{port}", ca_file)
        opened.append((listening, client))
        return client, log

    yield start
    for listening, client in opened:
        await client.close()
        listening.close()


def answer_in_pieces(server: Scripted, stream_id: int, body: bytes) -> None:
    server.h2.send_headers(stream_id, [(":status", "100")])
    # Over one frame: h2 sends the rest of the block in CONTINUATION frames.
    server.h2.send_headers(stream_id, [(":status", "200"), ("x-long", "v" * 20_000)])
    server.h2.send_data(stream_id, b"got " + body, pad_length=17)
    server.h2.send_headers(stream_id, [("x-trailer", "t")], end_stream=True)


async def test_an_answer_in_every_shape_a_server_may_give_is_read_whole(server: Any) -> None:
    client, log = await server(answer_in_pieces)
    answer = await client.request(b"POST", "/3/device/x", [(b"apns-topic", b"t")], b"ping")
    assert (answer.status, answer.body) == (200, b"got ping")
    assert answer.headers == {"x-long": "v" * 20_000}
    assert log == [b"ping"]


def tagged(server: Scripted, stream_id: int, body: bytes) -> None:
    """Answers ``x-tag: <body>``: h2 indexes a new value and refers to a known one by its
    index, so two answers can be the same bytes meaning different values."""
    server.h2.send_headers(stream_id, [(":status", "200"), ("x-tag", body.decode())])
    server.h2.send_data(stream_id, body, end_stream=True)


async def test_the_same_header_bytes_are_read_anew_once_the_table_changed(server: Any) -> None:
    client, _ = await server(tagged)
    tags = [b"a", b"a", b"b", b"b", b"a", b"a"]
    answers = [await client.request(b"POST", "/", [], tag) for tag in tags]
    # The second and fourth answers are both ":status 200, the newest entry": a client that
    # took the second's reading for the fourth would read "a".
    assert [answer.headers["x-tag"] for answer in answers] == ["a", "a", "b", "b", "a", "a"]
    answers[0].headers["x-tag"] = "changed"
    assert answers[1].headers["x-tag"] == "a"  # each answer has its own fields


def echo(server: Scripted, stream_id: int, body: bytes) -> None:
    server.h2.send_headers(stream_id, [(":status", "200")])
    server.h2.send_data(stream_id, str(len(body)).encode(), end_stream=True)


async def test_a_body_over_the_stream_window_waits_for_window_updates(server: Any) -> None:
    client, log = await server(echo, initial_window_size=1000)
    bodies = [bytes([n]) * 5000 for n in range(5)]
    answers = await asyncio.gather(*(client.request(b"POST", "/", [], b) for b in bodies))
    assert [answer.body for answer in answers] == [b"5000"] * 5
    assert sorted(log) == sorted(bodies)


def refuse(server: Scripted, stream_id: int, body: bytes) -> None:
    server.h2.reset_stream(stream_id, error_code=ErrorCode.REFUSED_STREAM)


async def test_a_refused_stream_was_not_sent(server: Any) -> None:
    client, _ = await server(refuse)
    with pytest.raises(ProviderError) as caught:
        await client.request(b"POST", "/", [], b"x")
    assert (caught.value.message, caught.value.not_accepted) == (
        "apns: not sent (RefusedStream)", True,
    )  # fmt: skip


def push_promise(server: Scripted, stream_id: int, body: bytes) -> None:
    promise = PushPromiseFrame(stream_id, promised_stream_id=2, data=b"\x82", flags=["END_HEADERS"])
    server.transport.write(server.h2.data_to_send() + promise.serialize())


def broken_settings(server: Scripted, stream_id: int, body: bytes) -> None:
    server.transport.write(b"\x00\x00\x05\x04\x00\x00\x00\x00\x00" + b"\x00" * 5)


@pytest.mark.parametrize(
    ("script", "code"),
    [(push_promise, ErrorCode.PROTOCOL_ERROR), (broken_settings, ErrorCode.FRAME_SIZE_ERROR)],
)
async def test_a_server_that_breaks_the_protocol_gets_a_goaway_naming_it(
    server: Any, script: Script, code: ErrorCode
) -> None:
    client, log = await server(script)
    with pytest.raises(ProviderError) as caught:
        await client.request(b"POST", "/", [], b"x")
    assert (caught.value.message, caught.value.not_accepted) == (
        "apns: no answer (ConnectionLost): it may have sent", False,
    )  # fmt: skip
    await asyncio.sleep(0.05)
    assert log == [b"x", code]
