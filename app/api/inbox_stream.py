"""``GET /v1/inbox/stream``: the recipient's inbox changes as Server-Sent Events.

Each event's ``id`` is the client's cursor (``streams.inbox_live``), so an ``EventSource``
that reconnects sends it back as ``Last-Event-ID`` and gets exactly what it missed, as long
as the recipient's feeds still hold it; when they do not, it gets ``reset`` and should read
its inbox again. Events (``data`` is JSON):

- ``counts`` first, on every (re)connection: ``{"unread": …, "unseen": …}``;
- ``message``: a new message, ``{"message": <as GET /v1/inbox>, "counts": …}``;
- ``read``, ``unread``, ``seen``, ``archived``, ``unarchived``: ``{"id": …, "read_at": …,
  "seen_at": …, "archived_at": …, "counts": …}``;
- ``reset``: ``{}``.

A comment line every ``HEARTBEAT_S`` keeps proxies from closing an idle stream. The stream
ends when the token expires (the app reconnects with a fresh one), when the recipient's tokens
are revoked (``InboxHub.end``; a reconnect with a revoked token is 401) and when the API process
stops (``InboxHub.close``; the browser reconnects and resumes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, Final

import msgspec
import structlog
from litestar import Request, get
from litestar.datastructures import State
from litestar.response import Stream
from redis.exceptions import RedisError

from app.api.inbox import (
    RECIPIENT_AUTH,
    CountsView,
    checked_grant,
    message_view,
    now_of,
    time_of,
)
from streams.inbox_live import Change, InboxFollower, InboxHub, format_cursor, parse_cursor
from streams.inbox_messages import MessageState, StoredMessage
from streams.inbox_messages import decode as decode_message
from streams.keys import KeySpace

log = structlog.get_logger(__name__)

Req = Request[Any, Any, State]
HEARTBEAT_S: Final = 15.0
# How long a browser waits before it reconnects (ms), sent once.
RETRY_MS: Final = 2000

_json = msgspec.json.Encoder()


class StateChange(msgspec.Struct, frozen=True):
    id: str
    read_at: datetime | None
    seen_at: datetime | None
    archived_at: datetime | None
    counts: CountsView


class NewMessage(msgspec.Struct, frozen=True):
    message: Any
    counts: CountsView


@get(
    "/v1/inbox/stream",
    raises=RECIPIENT_AUTH,
    response_headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
)
async def inbox_stream(request: Req) -> Stream:
    """The recipient's inbox changes as Server-Sent Events (resumable with Last-Event-ID)."""
    grant = await checked_grant(request, in_query=True)  # EventSource sends no header
    keys: KeySpace = request.app.state.key_space
    last = str(
        request.headers.get("last-event-id") or request.query_params.get("last_event_id") or ""
    )
    cursor = parse_cursor(last, keys.shards)
    resume = bool(last) and cursor is not None
    hub: InboxHub = request.app.state.inbox_hub
    follower = InboxFollower(
        request.app.state.redis, keys, grant.recipient_id, cursor or {}, hub.readers
    )
    if cursor is None:
        follower.cursor = dict.fromkeys(range(keys.shards), "0-0")
    ends = time.monotonic() + grant.expires_at - now_of(request).timestamp()
    return Stream(_events(hub, follower, resume, ends), media_type="text/event-stream")


async def _events(
    hub: InboxHub, follower: InboxFollower, resume: bool, ends: float
) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MS}\n\n".encode()
    with hub.listening(follower.recipient_id) as listener:
        try:
            whole = await follower.start(resume)
        except (RedisError, OSError) as error:
            # The answer has begun (200): end it; the browser reconnects after RETRY_MS.
            log.warning("inbox.stream_not_started", error=type(error).__name__)
            return
        if not whole:
            yield _event(follower, "reset", b"{}")
        yield _event(follower, "counts", _json.encode(_counts(follower)))
        if resume and whole:
            for change in await follower.catch_up():
                if follower.fresh(change):
                    yield _change_event(follower, change)
        while (left := ends - time.monotonic()) > 0 and not (
            hub.closing.is_set() or listener.ended
        ):
            try:
                await asyncio.wait_for(listener.wake.wait(), min(HEARTBEAT_S, left))
            except TimeoutError:
                yield b": ping\n\n"
                continue
            listener.wake.clear()
            changes: list[Change] = []
            while not listener.queue.empty():
                changes.append(listener.queue.get_nowait())
            if listener.behind:
                listener.behind = False
                try:
                    changes += await follower.catch_up()
                except (RedisError, OSError) as error:
                    log.warning("inbox.stream_behind", error=type(error).__name__)
                    return  # the browser reconnects and resumes from its last event
            for change in changes:
                if follower.fresh(change):
                    yield _change_event(follower, change)


def _counts(follower: InboxFollower) -> CountsView:
    unread, unseen = follower.totals()
    return CountsView(unread=unread, unseen=unseen)


def _change_event(follower: InboxFollower, change: Change) -> bytes:
    counts = _counts(follower)
    if change.kind == "new":
        view = message_view(StoredMessage(decode_message(change.body), MessageState()))
        return _event(follower, "message", _json.encode(NewMessage(view, counts)))
    state = MessageState.parse(change.body)
    data = StateChange(
        id=change.message_id,
        read_at=time_of(state.read_ms),
        seen_at=time_of(state.seen_ms),
        archived_at=time_of(state.archived_ms),
        counts=counts,
    )
    return _event(follower, change.kind, _json.encode(data))


def _event(follower: InboxFollower, kind: str, data: bytes) -> bytes:
    cursor = format_cursor(follower.cursor)
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (cursor.encode(), kind.encode(), data)
