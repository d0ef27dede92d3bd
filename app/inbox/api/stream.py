"""``GET /v1/inbox/stream``: the recipient's inbox changes as Server-Sent Events.

Each event's ``id`` is the client's cursor (``streams.inbox.live``), so an ``EventSource``
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

Streams are bounded per process and per recipient (``streams.inbox.admission``): past the
process's limit 503, past the recipient's its oldest stream ends with ``replaced`` (``{}``,
and a long ``retry``: an app should close that EventSource), or, while all of them are
young, 429; both with ``Retry-After``. A recipient's reconnects re-read its feeds a few
times a minute at most; another gets ``reset`` instead.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, Final

import msgspec
import structlog
from litestar import Request, get
from litestar.datastructures import State
from litestar.response import Stream
from redis.exceptions import RedisError

from app.api.errors import StreamsFull, TooManyStreams
from app.api.params import READS_QUERY
from app.inbox.api.routes import (
    RECIPIENT_READ,
    CountsView,
    checked_grant,
    message_view,
    now_of,
    time_of,
)
from streams.core.keys import KeySpace
from streams.inbox.admission import REPLACED_RETRY_MS
from streams.inbox.changes import Change, format_cursor, parse_cursor
from streams.inbox.live import FeedOverrun, InboxFollower, InboxHub, Listener
from streams.inbox.messages import MessageState, StoredMessage
from streams.inbox.messages import decode as decode_message

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
    raises=[*RECIPIENT_READ, TooManyStreams, StreamsFull],
    response_headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    # EventSource sends no header: the token and where to resume may come in the query.
    opt={READS_QUERY: ("token", "last_event_id")},
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
    # Refused (``streams.inbox.admission``): 429 or 503 with Retry-After (``app.api.errors``).
    listener = hub.admit(grant.recipient_id)
    # Past its re-reads this minute, a reconnect starts afresh and is told to reset.
    replayable = not resume or hub.resumes.allow(grant.recipient_id)
    if cursor is None or not replayable:
        cursor = dict.fromkeys(range(keys.shards), "0-0")
    follower = InboxFollower(
        request.app.state.redis, keys, grant.recipient_id, cursor, hub.readers,
        replay_entries=hub.limits.replay_entries,
    )  # fmt: skip
    ends = time.monotonic() + grant.expires_at - now_of(request).timestamp()
    events = _events(hub, listener, follower, resume and replayable, ends, reset=not replayable)
    # A stream whose answer never began (its client left at once) releases its place too.
    weakref.finalize(events, hub.release, grant.recipient_id, listener)
    return Stream(events, media_type="text/event-stream")


async def _opening(follower: InboxFollower, resume: bool, reset: bool) -> AsyncIterator[bytes]:
    """A (re)connection's first events: ``reset`` when the feeds cannot tell all it missed,
    the counts, and what it missed. ``RedisError``: the stream cannot start."""
    whole = await follower.start(resume)
    missed: list[Change] = []
    if resume and whole:
        try:
            missed = await follower.catch_up()
        except FeedOverrun:  # more than the feed can hold: the cursor is not from it
            await follower.start(resume=False)
            whole = False
    if reset or not whole:
        yield _event(follower, "reset", b"{}")
    yield _event(follower, "counts", _json.encode(_counts(follower)))
    for change in missed:
        if follower.fresh(change):
            yield _change_event(follower, change)


async def _events(
    hub: InboxHub,
    listener: Listener,
    follower: InboxFollower,
    resume: bool,
    ends: float,
    *,
    reset: bool = False,
) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MS}\n\n".encode()
    try:
        try:
            async for event in _opening(follower, resume, reset):
                yield event
        except (RedisError, OSError) as error:
            # The answer has begun (200): end it; the browser reconnects after RETRY_MS.
            log.warning("inbox.stream_not_started", error=type(error).__name__)
            return
        try:
            async for event in _following(hub, listener, follower, ends):
                yield event
        except (RedisError, OSError) as error:
            log.warning("inbox.stream_behind", error=type(error).__name__)
            return  # the browser reconnects and resumes from its last event
        if listener.replaced:
            yield b"retry: %d\nevent: replaced\ndata: {}\n\n" % REPLACED_RETRY_MS
    finally:
        hub.release(follower.recipient_id, listener)


async def _following(
    hub: InboxHub, listener: Listener, follower: InboxFollower, ends: float
) -> AsyncIterator[bytes]:
    """The changes as they come, until the token expires, the process stops, the recipient's
    tokens are revoked or a newer stream of the recipient replaces this one."""
    while (left := ends - time.monotonic()) > 0 and not (hub.closing.is_set() or listener.ended):
        try:
            await asyncio.wait_for(listener.wake.wait(), min(HEARTBEAT_S, left))
        except TimeoutError:
            yield b": ping\n\n"
            continue
        listener.wake.clear()
        changes: list[Change] = []
        while not listener.queue.empty():
            changes.append(listener.queue.get_nowait())
        if listener.replaced:
            return
        if listener.behind:
            listener.behind = False
            try:
                changes += await follower.catch_up()
            except FeedOverrun:  # start afresh: the client reads its inbox again
                async for event in _opening(follower, resume=False, reset=True):
                    yield event
                continue
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
