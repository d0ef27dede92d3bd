"""``GET /v1/inbox/stream`` with real processes (``clarion run``) and Redis: a stream resumed
with ``Last-Event-ID`` gets exactly the messages it missed and nothing of another recipient;
one whose feed no longer holds all it missed gets ``reset``; no token, no stream."""

from __future__ import annotations

import asyncio
import collections
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from app.inbox.api.stream import _events
from streams.core.keys import KeySpace
from streams.inbox.admission import REPLACED_RETRY_MS, StreamLimits
from streams.inbox.live import InboxFollower, InboxHub
from tests.conftest import REPO
from tests.e2e.api.test_unsubscribe import eventually, running_service, send
from tests.e2e.api_service import API_KEY, running_api_process
from tests.e2e.inbox.api.test_demo import in_app_id, order, token_for

pytestmark = pytest.mark.timeout(180)


def test_a_stream_resumed_with_last_event_id_gets_exactly_what_it_missed(
    key_prefix: str, tmp_path: Path
) -> None:
    with (
        running_service(key_prefix, REPO / "clarion.toml", tmp_path / "service.log") as (
            base_url, _,
        ),
        httpx.Client(base_url=base_url, timeout=10) as client,
    ):  # fmt: skip
        token = token_for(client)
        seen = in_app_id(send(client, "order-1", order("B-1")))
        with EventStream(base_url, token) as events:
            first = next(events)
            assert first["event"] == "counts"
            last_id = first["id"]
        missed = [in_app_id(send(client, f"order-{n}", order(f"B-{n}"))) for n in (2, 3)]
        send(client, "other", order("C-1", recipient="user-99"))  # another recipient's
        eventually(lambda: _unread(client, token) == 3, 10, "both missed messages in the inbox")
        with EventStream(base_url, token, last_id) as events:
            got = [next(events) for _ in range(3)]
        assert got[0]["event"] == "counts"
        assert json.loads(got[0]["data"]) == {"unread": 3, "unseen": 3}
        assert [e["event"] for e in got[1:]] == ["message", "message"]
        assert [json.loads(e["data"])["message"]["id"] for e in got[1:]] == missed
        assert seen not in missed


def _unread(client: httpx.Client, token: str) -> int:
    answer = client.get("/v1/inbox/counts", headers={"Authorization": f"Bearer {token}"})
    return int(answer.json()["unread"])


class _Events:
    def __init__(self, lines: Iterator[str]) -> None:
        self.lines = lines

    def __iter__(self) -> _Events:
        return self

    def __next__(self) -> dict[str, str]:
        """The next event (comments and the retry field skipped)."""
        event: dict[str, str] = {}
        for line in self.lines:
            if not line:
                if "event" in event:
                    return event
                event = {}
                continue
            name, _, value = line.partition(": ")
            if name in ("id", "event", "data"):
                event[name] = value
        raise StopIteration


class EventStream:
    """An SSE request to the inbox stream, as a context manager yielding its events."""

    def __init__(self, base_url: str, token: str, last_id: str | None = None) -> None:
        headers = {"Last-Event-ID": last_id} if last_id is not None else {}
        self.client = httpx.Client(base_url=base_url, timeout=10)
        self.request = self.client.stream("GET", f"/v1/inbox/stream?token={token}", headers=headers)

    def __enter__(self) -> _Events:
        response = self.request.__enter__()
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return _Events(response.iter_lines())

    def __exit__(self, *exc: object) -> None:
        self.request.__exit__(*exc)
        self.client.close()


def test_a_stream_that_missed_more_than_its_feed_holds_is_told_to_reset(
    key_prefix: str, tmp_path: Path
) -> None:
    text = (REPO / "clarion.toml").read_text()
    inbox = '[providers.inbox]\nkind = "inbox"\n'
    assert inbox in text, "clarion.toml changed: update this test"
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(text.replace(inbox, inbox + "feed_length = 10\n"))
    with (
        running_service(key_prefix, catalog, tmp_path / "service.log") as (base_url, _),
        httpx.Client(base_url=base_url, timeout=10) as client,
    ):
        token = token_for(client)
        send(client, "order-0", order("R-0"))
        eventually(lambda: _unread(client, token) == 1, 10, "the first message")
        with EventStream(base_url, token) as events:
            last_id = next(events)["id"]
        for n in range(1, 40):
            send(client, f"order-{n}", order(f"R-{n}"))
        eventually(lambda: _unread(client, token) == 40, 20, "every message in the inbox")
        with EventStream(base_url, token, last_id) as events:
            got = [next(events), next(events)]
        assert [e["event"] for e in got] == ["reset", "counts"]


def test_no_token_no_stream(key_prefix: str, tmp_path: Path) -> None:
    with running_service(key_prefix, REPO / "clarion.toml", tmp_path / "service.log") as (
        base_url, _,
    ):  # fmt: skip
        answer = httpx.get(f"{base_url}/v1/inbox/stream", timeout=10)
        assert answer.status_code == 401
        assert "token" in answer.json()["detail"]


async def test_a_stream_ends_when_its_token_expires(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    hub = InboxHub(real_redis, keys)
    follower = InboxFollower(real_redis, keys, "u-1", {0: "0-0"})
    started = time.monotonic()
    async with hub.running():
        listener = hub.admit("u-1")
        got = [chunk async for chunk in _events(hub, listener, follower, False, started + 0.5)]
    assert hub.clients == 0  # the ended stream gave its place back
    assert 0.5 <= time.monotonic() - started < 2
    assert got[0].startswith(b"retry: ")
    assert b"event: counts" in got[1]


def test_an_open_stream_ends_when_the_api_stops_and_the_api_stops_at_once() -> None:
    """uvicorn stops by waiting for the answers in progress; an inbox stream never ends by
    itself, so an open browser used to keep the API running until its token expired."""
    with running_api_process() as (base_url, process):
        with httpx.Client(base_url=base_url, timeout=10) as client:
            answer = client.post(
                "/v1/recipients/u-1/inbox-tokens",
                json={},
                headers={"Authorization": f"Bearer {API_KEY}"},
            )
            assert answer.status_code == 201, answer.text
            token = answer.json()["token"]
        with EventStream(base_url, token) as events:
            assert next(events)["event"] == "counts"
            stopped_at = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert list(events) == []  # the stream ends, with nothing more
            assert process.wait(timeout=10) in (0, -signal.SIGTERM)  # uvicorn re-raises it
        assert time.monotonic() - stopped_at < 5
    # running_api_process: no traceback was logged


def _inbox_token(base_url: str, recipient: str = "u-1") -> str:
    with httpx.Client(base_url=base_url, timeout=10) as client:
        answer = client.post(
            f"/v1/recipients/{recipient}/inbox-tokens",
            json={},
            headers={"Authorization": f"Bearer {API_KEY}"},
        )
        assert answer.status_code == 201, answer.text
        return str(answer.json()["token"])


async def _open_stream(
    port: int, token: str
) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream request on a connection of its own: its status, and the open connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /v1/inbox/stream?token=%s HTTP/1.1\r\nHost: c\r\n\r\n" % token.encode())
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 30)
    return int(status_line.split()[1]), reader, writer


async def _still_open(reader: asyncio.StreamReader) -> bool:
    """Whether the server still holds a stream: what it sent read, it sends nothing more for
    a while (its next heartbeat); an ended stream's connection is closed."""
    try:
        while await asyncio.wait_for(reader.read(65536), 1):
            pass
    except TimeoutError:
        return True
    return False


def test_a_thousand_streams_on_one_token_leave_at_most_the_cap_open() -> None:
    """Of 1,000 stream requests at once on one token, at most the cap (5) are open at any
    moment: those past it are refused. A stream that ends meanwhile (an error reading the
    recipient's counts on a loaded machine, say) gives its place to a later request, so more
    than 5 may have been 200, but never more than 5 still open."""
    with running_api_process() as (base_url, _):
        token = _inbox_token(base_url)
        port = int(httpx.URL(base_url).port or 0)

        async def open_all() -> tuple[list[int], int]:
            opened = await asyncio.gather(*(_open_stream(port, token) for _ in range(1000)))
            holding = [reader for status, reader, _ in opened if status == 200]
            still_open = sum(await asyncio.gather(*map(_still_open, holding)))
            for _, _, writer in opened:
                writer.close()
            return [status for status, _, _ in opened], still_open

        statuses, still_open = asyncio.run(open_all())
        assert 0 < still_open <= 5, (still_open, collections.Counter(statuses))
        assert statuses.count(200) >= 5
        assert set(statuses) <= {200, 429, 503}
        time.sleep(1)  # the closed streams give their places back
        with EventStream(base_url, token) as events:
            assert next(events)["event"] == "counts"


def test_a_recipient_re_reads_its_feed_a_few_times_a_minute_then_is_told_to_reset() -> None:
    """Each reconnect with an old Last-Event-ID re-read the whole feed, however often."""
    with running_api_process(CLARION_INBOX_RESUMES_PER_MINUTE="2") as (base_url, _):
        token = _inbox_token(base_url)
        firsts = []
        for _ in range(5):  # 2 a minute: at least one of 5 is past it, even across a minute
            with EventStream(base_url, token, "0:0-1") as events:
                firsts.append(next(events)["event"])
        assert firsts[:2] == ["counts", "counts"]
        assert "reset" in firsts[2:], firsts


async def test_a_replaced_stream_ends_telling_its_browser_to_wait(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    now = [1000.0]
    hub = InboxHub(real_redis, keys, StreamLimits(per_recipient=1), clock=lambda: now[0])
    follower = InboxFollower(real_redis, keys, "u-1", {0: "0-0"})
    async with hub.running():
        oldest = hub.admit("u-1")
        stream = _events(hub, oldest, follower, False, time.monotonic() + 30)
        assert (await anext(stream)).startswith(b"retry: ")
        assert b"event: counts" in await anext(stream)
        now[0] += 31
        newest = hub.admit("u-1")
        rest = [chunk async for chunk in stream]
    assert rest == [b"retry: %d\nevent: replaced\ndata: {}\n\n" % REPLACED_RETRY_MS]
    assert hub.clients == 1
    hub.release("u-1", newest)
