"""The API server's edge against a running ``clarion api``: a request head past the size
limit is refused (431) without the process growing by it, a head trickled slower than the
time limit ends the connection, and past the concurrency limit a request gets a JSON 503
with ``Retry-After``. Before these bounds, a 64 MiB header was answered 200 after the
process grew by 64 MB, and a trickled head was read for as long as it came."""

from __future__ import annotations

import json
import socket
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.e2e.api_service import API_KEY, running_api_process

pytestmark = pytest.mark.timeout(120)

HEALTH = b"GET /v1/ops/health HTTP/1.1\r\nHost: clarion\r\n"


def _connect(url: str) -> socket.socket:
    parts = httpx.URL(url)
    assert parts.port is not None
    connection = socket.create_connection((parts.host, parts.port), timeout=10)
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    return connection


def _answer(connection: socket.socket) -> bytes:
    """What the server sent until it closed the connection (b"" if nothing)."""
    got = b""
    try:
        while chunk := connection.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def _one_answer(connection: socket.socket) -> bytes:
    """One whole answer on a kept-alive connection: its head and as much body as its
    Content-Length says, however the bytes were split between reads."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = connection.recv(65536)
        assert chunk, f"closed after {got!r}"
        got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")[1:]
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = connection.recv(65536)
        assert chunk, f"closed after {got!r}"
        body += chunk
    assert len(body) == length, "more than one answer came"
    return head + b"\r\n\r\n" + body


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _status_and_json(answer: bytes) -> tuple[int, dict[str, object], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body), head


def test_a_64_mib_header_is_refused_and_the_process_does_not_grow_by_it() -> None:
    with running_api_process() as (url, process):
        before = _rss_bytes(process.pid)
        with _connect(url) as connection:
            connection.sendall(HEALTH + b"X-Padding: ")
            sent = 0
            try:
                while sent < 64 << 20:
                    connection.sendall(b"a" * 65536)
                    sent += 65536
                connection.sendall(b"\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server stopped reading: what the test wants
            answer = _answer(connection)
        grown = _rss_bytes(process.pid) - before
        status, body, _ = _status_and_json(answer)
        assert status == 431, answer[:300]
        assert "CLARION_MAX_HEADER_BYTES" in str(body["detail"])
        assert grown < 8 << 20, f"the process grew by {grown / 2**20:.1f} MiB"
        assert httpx.get(f"{url}/v1/ops/health", timeout=5).status_code == 200


def test_a_head_just_over_the_limit_is_refused_and_one_under_it_served() -> None:
    with running_api_process(CLARION_MAX_HEADER_BYTES="8192") as (url, _):
        under = httpx.get(f"{url}/v1/ops/health", headers={"X-Pad": "a" * 7000}, timeout=5)
        assert under.status_code == 200
        over = httpx.get(f"{url}/v1/ops/health", headers={"X-Pad": "a" * 8200}, timeout=5)
        assert over.status_code == 431, over.text
        assert over.json()["status_code"] == 431


def test_a_trickled_head_is_cut_off_after_the_header_timeout() -> None:
    with running_api_process(CLARION_HEADER_TIMEOUT="2") as (url, _), _connect(url) as connection:
        started = time.monotonic()
        connection.sendall(HEALTH)
        closed_after = None
        for number in range(20):  # a header line every 0.5 s: 10 s if never cut off
            time.sleep(0.5)
            try:
                connection.sendall(b"X-Line-%d: slow\r\n" % number)
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - started
                break
        answer = _answer(connection) if closed_after is None else b""
        closed_after = closed_after or time.monotonic() - started
        assert closed_after < 5, f"the trickled head was read for {closed_after:.1f} s"
        if answer:
            assert _status_and_json(answer)[0] == 408


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout() -> None:
    with running_api_process(CLARION_HEADER_TIMEOUT="1") as (url, _), _connect(url) as connection:
        started = time.monotonic()
        connection.settimeout(8)
        try:
            assert connection.recv(100) == b""
        except ConnectionResetError:
            pass
        except TimeoutError:
            pytest.fail("a silent connection was kept open past the header timeout")
        assert time.monotonic() - started < 4


def test_past_the_concurrency_limit_a_request_gets_a_json_503_with_retry_after() -> None:
    limits = {"CLARION_MAX_CONNECTIONS": "16", "CLARION_INBOX_STREAMS": "8"}
    with running_api_process(**limits) as (url, _), ExitStack() as held:
        for _ in range(16):  # idle connections: each holds a place until the head timeout
            held.enter_context(_connect(url))
        time.sleep(0.2)  # let the server accept them all
        with _connect(url) as connection:
            connection.sendall(HEALTH + b"\r\n")
            status, body, head = _status_and_json(_answer(connection))
        assert status == 503
        assert b"retry-after: 1" in head.lower()
        assert "CLARION_MAX_CONNECTIONS" in str(body["detail"])
        held.close()
        time.sleep(0.2)
        assert httpx.get(f"{url}/v1/ops/health", timeout=5).status_code == 200


def _inbox_token(url: str) -> str:
    answer = httpx.post(
        f"{url}/v1/recipients/u-1/inbox-tokens",
        json={},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=5,
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["token"])


def test_the_head_timeout_ends_neither_a_kept_alive_connection_nor_a_long_answer() -> None:
    """Only heads are timed: a stream open past the timeout goes on, and so does a kept-alive
    connection whose next request comes after it; that request's head is timed anew."""
    with running_api_process(CLARION_HEADER_TIMEOUT="1", CLARION_KEEP_ALIVE="10") as (url, _):
        token = _inbox_token(url)
        with _connect(url) as stream:
            stream.sendall(
                b"GET /v1/inbox/stream?token=%s HTTP/1.1\r\nHost: c\r\n\r\n" % token.encode()
            )
            got = stream.recv(65536)
            while b"\n\n" not in got.partition(b"event: counts")[2]:  # the whole event
                got += stream.recv(65536)
            assert got.startswith(b"HTTP/1.1 200")
            time.sleep(2.5)
            stream.settimeout(0.5)
            with pytest.raises(TimeoutError):  # open, and quiet until its heartbeat
                stream.recv(65536)
        with _connect(url) as connection:
            connection.sendall(HEALTH + b"\r\n")
            assert _one_answer(connection).startswith(b"HTTP/1.1 200")
            time.sleep(2)  # idle past the head timeout, within the keep-alive
            connection.sendall(HEALTH + b"\r\n")
            assert _one_answer(connection).startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            connection.sendall(HEALTH)  # and never the blank line
            assert _status_and_json(_answer(connection))[0] == 408
            assert time.monotonic() - started < 3


def test_a_body_that_stops_coming_ends_the_connection_after_the_body_timeout() -> None:
    limits = {"CLARION_HEADER_TIMEOUT": "1", "CLARION_BODY_TIMEOUT": "2"}
    with running_api_process(**limits) as (url, _), _connect(url) as connection:
        connection.sendall(
            b"POST /v1/notifications HTTP/1.1\r\nHost: c\r\nAuthorization: Bearer %s\r\n"
            b"Content-Type: application/json\r\nIdempotency-Key: slow-1\r\n"
            b'Content-Length: 1000\r\n\r\n{"recipient": ' % API_KEY.encode()
        )
        for _ in range(6):  # a byte every 0.5 s keeps it going past both timeouts
            time.sleep(0.5)
            connection.sendall(b" ")
        stopped = time.monotonic()
        connection.settimeout(10)
        status, body, _ = _status_and_json(_answer(connection))
        assert status == 408
        assert "CLARION_BODY_TIMEOUT" in str(body["detail"])
        assert 1.5 < time.monotonic() - stopped < 4
