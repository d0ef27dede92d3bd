"""The status webhooks' HTTP/1.1 client against a server written out here, for what a real
receiver rarely does on purpose: chunked and long answers, ``Connection: close``, an idle
connection closed under it, interim answers, and answers that are not HTTP."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from app.catalog.providers import GuardedConfig
from app.providers.ssrf import GuardedResolver, Policy, Target
from app.status_webhooks import http1
from app.status_webhooks.http1 import Http1Client, Unanswered

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


async def local(host: str, port: int) -> Sequence[str]:
    return ["127.0.0.1"]


def client(timeout: float = 1.0) -> Http1Client:
    policy = Policy(
        GuardedConfig(allow_http_hosts=["hooks.test"], allow_networks=["127.0.0.0/8"]), local
    )
    return Http1Client(
        GuardedResolver(policy, 1.0), timeout_seconds=timeout, connect_timeout_seconds=1.0
    )


@asynccontextmanager
async def serving(reply: Reply) -> AsyncIterator[tuple[Server, Http1Client, Target]]:
    """A server on 127.0.0.1 answering as ``reply`` says, and a client for it."""
    made = Server(reply)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.bind(("127.0.0.1", 0))
    made.port = listener.getsockname()[1]
    running = await asyncio.start_server(made.handle, sock=listener)
    posting = client()
    try:
        yield made, posting, Target("http", "hooks.test", made.port, "/s")
    finally:
        await posting.close()
        running.close()
        for writer in made.writers:
            writer.close()
        await asyncio.gather(*made.handlers, return_exceptions=True)
        await running.wait_closed()


def head(target: Target, body: bytes) -> bytes:
    return b"POST /s HTTP/1.1\r\nHost: hooks.test\r\nContent-Length: %d\r\n\r\n" % len(body)


async def post(made: Http1Client, target: Target, body: bytes = b"{}") -> http1.Answer:
    return await made.post(target, head(target, body), body)


async def test_a_chunked_answer_is_read_and_the_connection_kept() -> None:
    chunked = b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    async with serving(lambda n: chunked) as (server, made, target):
        for _ in range(3):
            assert (await post(made, target)).status == 202
    assert server.connections == 1


async def test_connection_close_is_honoured() -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    async with serving(lambda n: closing) as (server, made, target):
        for _ in range(3):
            assert (await post(made, target)).status == 200
    assert server.connections == 3


async def test_an_idle_connection_the_server_closed_is_replaced_without_a_failure() -> None:
    async with serving(lambda n: OK) as (server, made, target):
        assert (await post(made, target)).status == 200
        for writer in server.writers:
            writer.close()  # the server's idle timeout
        await asyncio.sleep(0.05)
        assert (await post(made, target, b'{"n":2}')).status == 200
    assert server.connections == 2
    assert len(server.requests) == 2  # the second request went once, on the new connection


async def test_a_connection_idle_too_long_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    async with serving(lambda n: OK) as (server, made, target):
        assert (await post(made, target)).status == 200
        monkeypatch.setattr(http1, "KEEPALIVE_SECONDS", 0.0)
        assert (await post(made, target)).status == 200
    assert server.connections == 2


async def test_an_answer_ended_by_closing_the_connection() -> None:
    until_closed = b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"
    http10 = b"HTTP/1.0 200 OK\r\n\r\nthanks"
    async with serving(lambda n: until_closed if n == 1 else http10) as (server, made, target):
        assert (await post(made, target)).status == 204
        assert (await post(made, target)).status == 200
    assert server.connections == 2


async def test_retry_after_and_interim_answers() -> None:
    answers = {
        1: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\nRetry-After: 30\r\n"
        b"Content-Length: 0\r\n\r\n",
    }
    async with serving(lambda n: answers.get(n, OK)) as (_, made, target):
        busy = await post(made, target)
        assert (busy.status, busy.retry_after) == (503, "30")
        assert (await post(made, target)).status == 200


async def test_a_long_answer_is_not_read_to_its_end() -> None:
    long = b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n" + b"x" * 200_000
    async with serving(lambda n: long if n == 1 else OK) as (server, made, target):
        assert (await post(made, target)).status == 200
        assert (await post(made, target)).status == 200
    assert server.connections == 2  # the long one was closed, not drained


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (lambda n: b"SMTP ready\r\n\r\n", "an answer that is not HTTP"),
        (lambda n: None, "connection to hooks.test broke (ConnectionResetError)"),
        (
            lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
            "hooks.test did not answer in time",
        ),
    ],
)
async def test_what_is_no_answer(reply: Reply, error: str) -> None:
    async with serving(reply) as (_, made, target):
        made.timeout_seconds = 0.5
        with pytest.raises(Unanswered) as failed:
            await post(made, target)
    assert str(failed.value).startswith(error)
