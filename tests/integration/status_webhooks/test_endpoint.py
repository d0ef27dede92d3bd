"""One producer's status webhook URL against a real receiver (tests/peers/webhook.py) that
verifies every signature with the ``standardwebhooks`` library: what a POST carries, what
each answer means, TLS for the URL's own host name, keep-alive, and what the SSRF guard
refuses. Then against a server written out here, for what a real receiver rarely does on
purpose: chunked and long answers, ``Connection: close``, an idle connection closed under
it, interim answers, and answers that are not HTTP. ``hooks.test`` resolves to 127.0.0.1
through an injected resolver."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trustme
from standardwebhooks import Webhook

from app import __version__
from app.catalog import parse_catalog
from app.catalog.status_webhooks import StatusWebhooksConfig
from app.providers import http
from app.status_webhooks.endpoint import Endpoint, UrlGuard, new_secret
from streams.status_webhooks.store import StatusWebhook
from tests.peers.webhook import Answer, Receiver, Served, serve

SECRET = "whsec_" + base64.b64encode(b"clarion-status-hook-key-32-bytes").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"somebody-else-s-key-of-32-bytes!").decode()
BODY = b'{"type":"delivery.sent","data":{"delivery_id":"d-1","version":3}}'


async def resolve_locally(host: str, port: int) -> Sequence[str]:
    if host == "hooks.test":
        return ["127.0.0.1"]
    if host == "inside.test":
        return ["10.1.2.3"]
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def config(extra: str = "") -> StatusWebhooksConfig:
    text = (
        '[status_webhooks]\nallow_http_hosts = ["hooks.test", "127.0.0.1", "inside.test"]\n'
        'allow_networks = ["127.0.0.0/8"]\ntimeout_seconds = 1\nconnect_timeout_seconds = 1\n'
    )
    return parse_catalog(text + extra).status_webhooks


def hook(url: str, secret: str = SECRET) -> StatusWebhook:
    return StatusWebhook(url=url, secret=secret, updated_ms=1)


@pytest.fixture
def served() -> Iterator[Served]:
    with serve(Receiver(SECRET)) as running:
        yield running


@pytest.fixture
async def endpoint(served: Served) -> AsyncIterator[Endpoint]:
    made = Endpoint("shop", config(), resolver=resolve_locally)
    made.configure(hook(served.url("/statuses?account=7", host="hooks.test")))
    yield made
    await made.close()


async def test_a_post_is_signed_so_a_standard_webhooks_library_verifies_it(
    served: Served, endpoint: Endpoint
) -> None:
    answer = await endpoint.post("d-1.3", BODY)
    assert (answer.ok, answer.status_code) == (True, 200)
    kept = served.receiver.deliveries["d-1.3"]
    assert (kept.path, kept.body) == ("/statuses", BODY)
    assert kept.headers["host"] == f"hooks.test:{served.port}"
    assert kept.headers["content-type"] == "application/json"
    assert kept.headers["user-agent"] == f"Clarion-Webhooks/{__version__}"
    # Verified again here, as a producer's receiver would: the id with its dot included.
    assert Webhook(SECRET).verify(kept.body, kept.headers) == json.loads(BODY)
    assert served.receiver.unverified == 0


async def test_another_secret_is_refused_by_the_receiver(served: Served) -> None:
    impostor = Endpoint("shop", config(), resolver=resolve_locally)
    impostor.configure(hook(served.url(host="hooks.test"), OTHER_SECRET))
    answer = await impostor.post("d-1.3", BODY)
    await impostor.close()
    assert (answer.ok, answer.status_code, answer.error) == (False, 401, "hooks.test answered 401")
    assert served.receiver.unverified == 1


@pytest.mark.parametrize(
    ("scripted", "status", "retry_after"),
    [
        (Answer(503, {"Retry-After": "7"}), 503, 7.0),
        (Answer(429), 429, None),
        (Answer(410), 410, None),
        (Answer(302, {"Location": "https://elsewhere.example/"}), 302, None),
        (Answer(400), 400, None),
    ],
)
async def test_any_answer_but_2xx_is_a_failure_to_retry(
    served: Served, endpoint: Endpoint, scripted: Answer, status: int, retry_after: float | None
) -> None:
    served.receiver.script("/statuses", scripted)
    answer = await endpoint.post("d-1.3", BODY)
    assert (answer.ok, answer.status_code, answer.retry_after) == (False, status, retry_after)
    assert answer.error == f"hooks.test answered {status}"
    assert (await endpoint.post("d-1.3", BODY)).ok  # the script is used up: 200 again


async def test_no_answer_in_time(served: Served, endpoint: Endpoint) -> None:
    served.receiver.script("/statuses", Answer(hang_seconds=5))
    answer = await endpoint.post("d-1.3", BODY)
    assert (answer.ok, answer.status_code) == (False, 0)
    assert answer.error == "hooks.test did not answer in time"
    assert (await endpoint.post("d-1.4", BODY)).ok  # a new connection, not the hung one


async def test_a_refused_connection_and_an_unknown_name() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    endpoint = Endpoint("shop", config(), resolver=resolve_locally)
    endpoint.configure(hook(f"http://hooks.test:{port}/s"))
    refused = await endpoint.post("d-1.3", BODY)
    assert refused.error == "cannot connect to hooks.test: Connection refused"
    endpoint.configure(hook("https://nowhere.test/s"))
    unknown = await endpoint.post("d-1.3", BODY)
    assert unknown.error.startswith("nowhere.test did not resolve")
    await endpoint.close()


async def test_the_guard_refuses_private_addresses_at_every_connection(served: Served) -> None:
    endpoint = Endpoint("shop", config(), resolver=resolve_locally)
    endpoint.configure(hook("http://inside.test/s"))
    answer = await endpoint.post("d-1.3", BODY)
    await endpoint.close()
    assert answer.error == (
        "inside.test resolves to 10.1.2.3, a private address (see allow_networks)"
    )
    assert not served.receiver.attempts


def test_a_url_or_secret_it_cannot_use_fails_every_post_saying_why() -> None:
    endpoint = Endpoint("shop", StatusWebhooksConfig())
    endpoint.configure(hook("http://hooks.example.com/s"))
    assert endpoint._refused.startswith("URL refused: plain http to hooks.example.com: use https")
    endpoint.configure(hook("https://hooks.example.com/s", secret="nope"))
    assert endpoint._refused.startswith("secret is not a Standard Webhooks secret")


async def test_connections_are_kept_alive(served: Served, endpoint: Endpoint) -> None:
    for number in range(20):
        assert (await endpoint.post(f"d-{number}.1", BODY)).ok
    assert len(served.receiver.connections) == 1


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


async def test_https_checks_the_certificate_for_the_url_s_host(
    ca: trustme.CA, tmp_path: Path
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with serve(Receiver(SECRET), ca.issue_cert("hooks.test")) as served:
        trusting = Endpoint("shop", config(f'ca_file = "{ca_file}"'), resolver=resolve_locally)
        trusting.configure(hook(served.url("/s", host="hooks.test")))
        assert (await trusting.post("d-1.3", BODY)).ok
        assert (await trusting.post("d-1.4", BODY)).ok
        # The same address, another name: the certificate is not for it.
        trusting.configure(hook(served.url("/s", host="127.0.0.1")))
        wrong_name = await trusting.post("d-1.5", BODY)
        await trusting.close()
        system = Endpoint("shop", config(), resolver=resolve_locally)
        system.configure(hook(served.url("/s", host="hooks.test")))
        unknown_ca = await system.post("d-1.6", BODY)
        await system.close()
    assert set(served.receiver.deliveries) == {"d-1.3", "d-1.4"}
    assert len(served.receiver.connections) == 1
    assert wrong_name.error.startswith("TLS with 127.0.0.1 refused: ")
    assert unknown_ca.error.startswith("TLS with hooks.test refused: ")


async def test_no_error_text_holds_the_url_s_path_or_query() -> None:
    endpoint = Endpoint("shop", config(), resolver=resolve_locally)
    endpoint.configure(hook("https://nowhere.test/in/tok3n?key=s3cret"))
    answer = await endpoint.post("d-1.3", BODY)
    await endpoint.close()
    assert answer.error.startswith("nowhere.test did not resolve")
    assert "tok3n" not in answer.error
    assert "s3cret" not in answer.error


def test_the_api_judges_urls_as_the_endpoint_does() -> None:
    guard = UrlGuard(StatusWebhooksConfig())
    assert guard.refusal("https://hooks.example.com/s") is None
    assert guard.refusal("https://169.254.169.254/latest") == (
        "169.254.169.254 is a link-local address (as cloud metadata services use) "
        "(see allow_networks)"
    )


def test_a_new_secret_is_32_random_bytes_a_library_takes() -> None:
    made = {new_secret() for _ in range(3)}
    assert len(made) == 3
    for secret in made:
        assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
        Webhook(secret)  # a Standard Webhooks library reads it


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
# What the server answers to the n-th request it reads (the last one again after the list).
Reply = Callable[[int], bytes | None]


@dataclass
class Server:
    """Reads whole requests, answers as ``reply`` says (None: close without answering)."""

    reply: Reply
    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    handlers: list[asyncio.Task[None]] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        self.handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                self.requests.append(head + await reader.readexactly(length))
                answer = self.reply(len(self.requests))
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if b"Connection: close" in answer or answer.startswith(b"HTTP/1.0"):
                    break  # as a server does after such an answer
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


@asynccontextmanager
async def serving(reply: Reply) -> AsyncIterator[tuple[Server, Endpoint]]:
    """A server on 127.0.0.1 answering as ``reply`` says, and an endpoint posting to it."""
    made = Server(reply)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.bind(("127.0.0.1", 0))
    made.port = listener.getsockname()[1]
    running = await asyncio.start_server(made.handle, sock=listener)
    posting = Endpoint("shop", config(), resolver=resolve_locally)
    posting.configure(hook(f"http://hooks.test:{made.port}/s"))
    try:
        yield made, posting
    finally:
        await posting.close()
        running.close()
        for writer in made.writers:
            writer.close()
        await asyncio.gather(*made.handlers, return_exceptions=True)
        await running.wait_closed()


async def test_a_chunked_answer_is_read_and_the_connection_kept() -> None:
    chunked = b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    async with serving(lambda n: chunked) as (server, posting):
        for _ in range(3):
            assert (await posting.post("d-1.3", BODY)).status_code == 202
    assert server.connections == 1


async def test_connection_close_is_honoured() -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    async with serving(lambda n: closing) as (server, posting):
        for _ in range(3):
            assert (await posting.post("d-1.3", BODY)).status_code == 200
    assert server.connections == 3


async def test_an_idle_connection_the_server_closed_is_replaced_without_a_failure() -> None:
    async with serving(lambda n: OK) as (server, posting):
        assert (await posting.post("d-1.3", BODY)).ok
        for writer in server.writers:
            writer.close()  # the server's idle timeout
        await asyncio.sleep(0.05)
        assert (await posting.post("d-2.3", BODY)).ok
    assert server.connections == 2
    assert len(server.requests) == 2  # the second request went once, on the new connection


async def test_a_connection_idle_too_long_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "KEEPALIVE_SECONDS", 0.05)
    async with serving(lambda n: OK) as (server, posting):
        assert (await posting.post("d-1.3", BODY)).ok
        await asyncio.sleep(0.1)
        assert (await posting.post("d-1.3", BODY)).ok
    assert server.connections == 2


async def test_an_answer_ended_by_closing_the_connection() -> None:
    until_closed = b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"
    http10 = b"HTTP/1.0 200 OK\r\n\r\nthanks"
    async with serving(lambda n: until_closed if n == 1 else http10) as (server, posting):
        assert (await posting.post("d-1.3", BODY)).status_code == 204
        assert (await posting.post("d-1.3", BODY)).status_code == 200
    assert server.connections == 2


async def test_retry_after_and_interim_answers() -> None:
    answers = {
        1: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\nRetry-After: 30\r\n"
        b"Content-Length: 0\r\n\r\n",
    }
    async with serving(lambda n: answers.get(n, OK)) as (_, posting):
        busy = await posting.post("d-1.3", BODY)
        assert (busy.status_code, busy.retry_after) == (503, 30.0)
        assert (await posting.post("d-1.3", BODY)).ok


async def test_a_long_answer_is_not_read_to_its_end() -> None:
    long = b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n" + b"x" * 200_000
    async with serving(lambda n: long if n == 1 else OK) as (server, posting):
        assert (await posting.post("d-1.3", BODY)).ok
        assert (await posting.post("d-1.3", BODY)).ok
    assert server.connections == 2  # the long one was closed, not drained


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (lambda n: b"SMTP ready\r\n\r\n", "an answer that is not HTTP from hooks.test"),
        (lambda n: None, "connection to hooks.test broke (ServerDisconnected)"),
        (
            lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
            "hooks.test did not answer in time",
        ),
    ],
)
async def test_what_is_no_answer(reply: Reply, error: str) -> None:
    async with serving(reply) as (_, posting):
        answer = await posting.post("d-1.3", BODY)
    assert (answer.ok, answer.status_code) == (False, 0)
    assert answer.error.startswith(error)
