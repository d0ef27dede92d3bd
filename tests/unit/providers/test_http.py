"""What every HTTP adapter shares: reading Retry-After and rate-limit resets, classifying a
status or a transport failure (may another provider send it?), quoting provider texts with
addresses masked, and the keep-alive client: the bounded answer, connections reused and
bounded, no redirect followed, nothing taken from the environment, no cookies kept."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import aiohttp
import msgspec
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from app.catalog.providers import SandboxConfig
from app.providers import http
from app.providers.base import ProviderError, Reason
from streams.core.vocabulary import ErrorClass
from tests.peers.serving import Answer, Fault, HttpPeer, Request, serve
from tests.servers import free_port

SECRET_PATH = "/2010-04-01/Accounts/AC123/Messages.json"


def answer(status: int, **headers: str) -> http.Answer:
    return http.Answer(status, CIMultiDictProxy(CIMultiDict(headers)), b"")


def limits(**values: object) -> SandboxConfig:
    return msgspec.convert({"kind": "sandbox", **values}, SandboxConfig)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("7", 7.0), ("0", 0.0), ("999999", http.MAX_RETRY_AFTER), ("", None), ("soon", None)],
)
def test_retry_after_reads_seconds_capped(value: str, expected: float | None) -> None:
    assert http.retry_after(answer(429, **{"Retry-After": value})) == expected


def test_retry_after_reads_an_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    wait = http.retry_after(answer(503, **{"Retry-After": when}))
    assert wait is not None
    assert 28 <= wait <= 30


def test_wait_until_reads_a_unix_reset_time() -> None:
    wait = http.wait_until(str(int(time.time()) + 40))
    assert wait is not None
    assert 38 <= wait <= 40
    assert http.wait_until(str(int(time.time()) - 5)) == 0.0
    assert http.wait_until("tomorrow") is None


@pytest.mark.parametrize(
    ("status", "error_class", "not_accepted", "reason"),
    [
        (429, ErrorClass.TRANSIENT, True, None),
        (503, ErrorClass.TRANSIENT, True, None),
        (500, ErrorClass.TRANSIENT, False, None),
        (502, ErrorClass.TRANSIENT, False, None),
        (504, ErrorClass.TRANSIENT, False, None),
        (401, ErrorClass.TRANSIENT, True, None),
        (403, ErrorClass.TRANSIENT, True, None),
        (404, ErrorClass.TRANSIENT, True, None),
        (301, ErrorClass.TRANSIENT, True, None),
        (400, ErrorClass.PERMANENT, False, Reason.REJECTED),
        (413, ErrorClass.PERMANENT, False, Reason.REJECTED),
        (422, ErrorClass.PERMANENT, False, Reason.REJECTED),
    ],
)
def test_a_status_is_classified_the_same_for_every_provider(
    status: int, error_class: ErrorClass, not_accepted: bool, reason: Reason | None
) -> None:
    error = http.status_error("p", answer(status, **{"Retry-After": "5"}), "why")
    assert (error.error_class, error.not_accepted, error.reason) == (
        error_class, not_accepted, reason,
    )  # fmt: skip
    assert error.message == f"p: HTTP {status}: why"


def test_a_rate_limit_and_a_server_error_carry_retry_after() -> None:
    assert http.status_error("p", answer(429, **{"Retry-After": "9"})).retry_after == 9.0
    assert http.status_error("p", answer(500, **{"Retry-After": "2"})).retry_after == 2.0
    assert http.status_error("p", answer(429)).retry_after is None


@pytest.mark.parametrize(
    ("error", "kind", "not_accepted"),
    [
        (aiohttp.ConnectionTimeoutError("slow"), "ConnectTimeout", True),
        (aiohttp.InvalidURL("ftp://x"), "InvalidURL", True),
        (aiohttp.NonHttpUrlClientError("ftp://x"), "UnsupportedProtocol", True),
        (aiohttp.ServerDisconnectedError(), "ServerDisconnected", False),
        (aiohttp.ClientPayloadError("cut"), "BrokenAnswer", False),
        (aiohttp.SocketTimeoutError("slow"), "ReadTimeout", False),
        (TimeoutError(), "ReadTimeout", False),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), "ReadError", False),
    ],
)
def test_only_a_call_that_sent_nothing_is_not_accepted(
    error: BaseException, kind: str, not_accepted: bool
) -> None:
    classified = http.transport_error("p", error)
    assert classified.error_class is ErrorClass.TRANSIENT
    assert classified.not_accepted is not_accepted
    assert f"({kind})" in classified.message


def test_quoted_masks_the_echoed_address_and_anything_like_a_secret() -> None:
    text = "The 'To' number 5551234 is bad; from me@example.com; Bearer sk-live-1"
    quoted = http.quoted(text, "5551234")
    assert quoted == "The 'To' number <address> is bad; from <email>; Bearer <secret>"
    assert len(http.quoted("word " * 2_000)) == http.MAX_QUOTED_CHARS + 3


class Echo(HttpPeer):
    """Answers every request with ``size`` bytes after ``delay`` seconds (or ``answer``);
    keeps each request's headers."""

    def __init__(self, size: int = 2, delay: float = 0.0, answer: Answer | None = None) -> None:
        super().__init__()
        self.size, self.delay, self.answer = size, delay, answer
        self.seen: list[dict[str, str]] = []

    async def handle(self, request: Request) -> Answer:
        self.seen.append(request.headers)
        await asyncio.sleep(self.delay)
        return self.answer or Answer(200, b"x" * self.size)

    def fault_answer(self, fault: Fault) -> Answer:
        return Answer(int(fault.value))


@pytest.fixture
def echo() -> Echo:
    return Echo()


@pytest.fixture
def base(echo: Echo) -> Iterator[str]:
    with serve(echo) as served:
        yield served.base_url


@pytest.fixture
async def client() -> AsyncIterator[http.Client]:
    one = http.Client("p", limits(max_in_flight=4, timeout_seconds=2))
    yield one
    await one.close()


async def post(client: http.Client, url: str, path: str = "/") -> http.Answer:
    return await client.post(URL(url + path), data=b"{}", headers={"Content-Type": "x/y"})


async def test_an_answer_is_read_up_to_the_bound_and_its_connection_closed(
    echo: Echo, base: str, client: http.Client
) -> None:
    echo.size = http.MAX_ANSWER_BYTES * 4
    got = await post(client, base)
    assert got.status == 200
    assert len(got.body) == http.MAX_ANSWER_BYTES
    await post(client, base)
    # The rest of each answer was never read: its connection could not carry another call.
    assert len(echo.connections) == 2


async def test_connections_are_reused_and_no_more_than_in_flight_open(
    echo: Echo, base: str, client: http.Client
) -> None:
    echo.delay = 0.01
    for _ in range(20):
        assert (await post(client, base)).body == b"xx"
    assert len(echo.connections) == 1
    await asyncio.gather(*(post(client, base) for _ in range(40)))
    assert echo.requests == 60
    assert len(echo.connections) <= 4


async def test_a_redirect_is_answered_not_followed(
    echo: Echo, base: str, client: http.Client
) -> None:
    echo.answer = Answer(302, headers={"location": "/elsewhere"})
    got = await post(client, base)
    assert (got.status, got.headers["Location"], echo.requests) == (302, "/elsewhere", 1)


async def test_no_cookie_is_kept_and_no_proxy_taken_from_the_environment(
    echo: Echo, base: str, client: http.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{free_port()}")
    echo.answer = Answer(200, headers={"set-cookie": "session=abc; Path=/"})
    await post(client, base)
    await post(client, base)
    assert echo.requests == 2  # straight to the peer, not to the (closed) proxy
    assert "cookie" not in echo.seen[1]


def test_a_client_made_before_the_loop_opens_its_session_inside_it(base: str) -> None:
    made = http.Client("p", limits())

    async def use() -> int:
        status = (await post(made, base)).status
        await made.close()
        return status

    assert asyncio.run(use()) == 200
    assert asyncio.run(use()) == 200  # a new session after close, in the new loop


async def test_a_call_waiting_for_a_busy_pool_gives_up_not_accepted(echo: Echo, base: str) -> None:
    echo.delay = 0.5
    one = http.Client("p", limits(max_in_flight=1, timeout_seconds=2, connect_timeout_seconds=0.1))
    first = asyncio.create_task(post(one, base))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await post(one, base)
    assert time.monotonic() - started < 0.4
    assert caught.value.not_accepted
    assert caught.value.message == "p: not reached (ConnectTimeout)"
    assert (await first).status == 200
    await one.close()


async def test_no_answer_in_time_may_have_sent(echo: Echo, base: str) -> None:
    echo.delay = 0.6
    one = http.Client("p", limits(timeout_seconds=0.2))
    with pytest.raises(ProviderError) as caught:
        await post(one, base)
    await one.close()
    assert not caught.value.not_accepted
    assert caught.value.message == "p: no answer (ReadTimeout): it may have sent"


async def test_a_connection_refused_or_not_opened_sent_nothing_and_the_text_hides_the_url(
    base: str,
) -> None:
    with socket.socket() as full, socket.socket() as first:
        # A listener whose backlog is full: the kernel drops further connection attempts.
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        first.connect(full.getsockname())
        cases: list[tuple[str, AbstractResolver | None, str]] = [
            (f"http://127.0.0.1:{free_port()}", None, "ConnectError"),
            (f"http://127.0.0.1:{full.getsockname()[1]}", None, "ConnectTimeout"),
            ("http://api.provider.test", NoSuchName(), "NameNotResolved"),
            (base.replace("http://", "https://"), None, "TLSError"),  # no TLS spoken there
        ]
        for url, resolver, kind in cases:
            one = http.Client("p", limits(connect_timeout_seconds=0.3), resolver=resolver)
            with pytest.raises(ProviderError) as caught:
                await post(one, url, SECRET_PATH)
            await one.close()
            assert caught.value.not_accepted
            assert caught.value.message == f"p: not reached ({kind})"


class NoSuchName(AbstractResolver):
    """A name lookup that finds nothing, as the system's does for an unknown name."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    async def close(self) -> None:
        pass


async def test_a_connection_dropped_after_the_request_may_have_sent() -> None:
    got: list[bytes] = []

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await reader.readuntil(b"\r\n\r\n"))
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    one = http.Client("p", limits())
    with pytest.raises(ProviderError) as caught:
        await post(one, f"http://127.0.0.1:{port}", SECRET_PATH)
    await one.close()
    server.close()
    await server.wait_closed()
    [request] = got
    assert request.startswith(f"POST {SECRET_PATH} HTTP/1.1".encode())
    assert not caught.value.not_accepted
    assert caught.value.message == "p: no answer (ServerDisconnected): it may have sent"
