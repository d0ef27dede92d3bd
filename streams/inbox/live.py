"""Inbox changes as they happen, for the API's realtime streams (``GET /v1/inbox/stream``).

Every inbox change is an entry in its recipient's feed on its shard and is published on one
Pub/Sub channel (``streams/delivery/finish.lua``, ``mark.lua``). An API process holds
one subscription to it (``InboxHub``), whatever the number of its clients, and hands each
change to the listeners of its recipient. A client names what it has seen with a cursor:
per shard, the last feed entry it got. ``InboxFollower`` turns the feeds and the published
changes into one ordered stream of changes for one client: it reads what the feeds hold
after the client's cursor (after a reconnect, or when the subscription or the client fell
behind), skips what it has seen already, and says when the feeds no longer hold all that
it missed (then the client reads its inbox again). Changes and cursors are in
``streams.inbox.changes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import structlog
from redis.asyncio import Redis, RedisCluster
from redis.exceptions import RedisError

from streams.core.connection import being_cancelled
from streams.core.errors import ClarionError
from streams.core.keys import KeySpace
from streams.inbox.admission import ResumeWindow, StreamLimits, process_full, recipient_full
from streams.inbox.changes import Change, entry_order, parse_published
from streams.inbox.revocation import REVOKED_PREFIX

log = structlog.get_logger(__name__)

# Changes a listener may have waiting; past that it catches up from the feeds instead.
QUEUE_SIZE: Final = 256
# Followers reading Redis at once, per process: thousands of clients reconnecting together
# (after a restart, or all catching up after the subscription was lost) wait their turn
# instead of asking the client's connection pool for more connections than it has.
READERS: Final = 64
_RETRY_S: Final = 0.5


class FeedOverrun(ClarionError):
    """More changes came after a client's cursor than one re-read takes: it reads its inbox
    again (``reset``)."""


@dataclass(eq=False, slots=True)
class Listener:
    """One client's waiting changes; ``behind``: some were dropped, catch up from the feeds;
    ``ended``: the recipient's tokens were revoked, end the stream (a client whose token is
    still good reconnects and resumes); ``replaced``: a newer stream of its recipient took its
    place (``streams.inbox.admission``)."""

    queue: asyncio.Queue[Change] = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))
    behind: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False
    opened: float = 0.0
    replaced: bool = False

    def offer(self, change: Change | None) -> None:
        if change is None:
            self.behind = True
        else:
            try:
                self.queue.put_nowait(change)
            except asyncio.QueueFull:
                self.behind = True
        self.wake.set()


class InboxHub:
    """One Pub/Sub subscription per process, shared by every realtime client."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        limits: StreamLimits | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.channel = keys.inbox_live
        self.limits = limits or StreamLimits()
        self.clock = clock
        self.resumes = ResumeWindow(self.limits.resumes_per_minute, clock)
        # Per recipient, its listeners oldest first (a dict keeps the order of insertion).
        self._listeners: dict[str, dict[Listener, None]] = {}
        self._count = 0
        self.subscribed = asyncio.Event()
        self.readers = asyncio.Semaphore(READERS)
        # Set when the process stops: every stream ends (see ``close``).
        self.closing = asyncio.Event()

    @property
    def clients(self) -> int:
        return self._count

    def admit(self, recipient_id: str) -> Listener:
        """A listener for a new stream of ``recipient_id``, within the limits: its oldest
        stream replaced when it has as many as it may (``streams.inbox.admission``);
        ``RateLimited`` or ``Unavailable`` (``StreamRefused``) when no stream may open now."""
        limits = self.limits
        if self._count >= limits.streams:
            raise process_full(limits)
        now = self.clock()
        found = self._listeners.get(recipient_id)
        if found is not None and len(found) >= limits.per_recipient:
            oldest = next(iter(found))
            if now - oldest.opened < limits.replace_after_s:
                raise recipient_full(limits, oldest.opened + limits.replace_after_s - now)
            self.release(recipient_id, oldest)
            oldest.replaced = True
            oldest.wake.set()
        listener = Listener(opened=now)
        self._listeners.setdefault(recipient_id, {})[listener] = None
        self._count += 1
        return listener

    def release(self, recipient_id: str, listener: Listener) -> None:
        """Forget ``listener`` (its stream ended, or was replaced); again is nothing."""
        found = self._listeners.get(recipient_id)
        if found is None or listener not in found:
            return
        del found[listener]
        self._count -= 1
        if not found:
            del self._listeners[recipient_id]

    def close(self) -> None:
        """End every client's stream: the process is stopping, and a stream never ends by
        itself (its browser reconnects to another process, resuming where it was)."""
        self.closing.set()
        for listeners in list(self._listeners.values()):
            for listener in list(listeners):
                listener.wake.set()

    def end(self, recipient_id: str) -> None:
        """End the streams of a recipient whose tokens were revoked."""
        for listener in list(self._listeners.get(recipient_id, ())):
            listener.ended = True
            listener.wake.set()

    @contextlib.contextmanager
    def listening(self, recipient_id: str) -> Iterator[Listener]:
        listener = self.admit(recipient_id)
        try:
            yield listener
        finally:
            self.release(recipient_id, listener)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Subscribe for as long as the block runs (an app's lifespan)."""
        task = asyncio.create_task(self._run(), name="inbox-hub")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            try:
                await self._subscribed()
            except (RedisError, OSError) as error:
                if being_cancelled():
                    # The client turned the cancellation into an error of its own: looping
                    # on would keep a stopping API process alive for ever.
                    raise asyncio.CancelledError from error
                log.warning("inbox.subscription_lost", error=str(error))
            if being_cancelled():
                # The client swallowed the cancellation: subscribing again would wait for
                # ever, and so would a stopping API process.
                raise asyncio.CancelledError
            # Whatever was published meanwhile is in the feeds: every client catches up.
            self.subscribed.clear()
            for listeners in list(self._listeners.values()):
                for listener in list(listeners):
                    listener.offer(None)
            await asyncio.sleep(_RETRY_S)

    async def _subscribed(self) -> None:
        if isinstance(self.redis, RedisCluster):
            # A cluster's pub/sub client picks its node from the slot table without filling
            # it first (every other call does): before any command, it is empty.
            await self.redis.initialize()
        async with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(self.channel)
            self.subscribed.set()
            # Asked again before every wait: a client that swallowed the cancellation (while
            # subscribing, or in a read) would otherwise wait for ever, with no timer left
            # to wake the loop; ``_run`` then ends as cancelled.
            while not being_cancelled():
                message = await pubsub.get_message(timeout=None)
                if message is None or message.get("type") != "message":
                    continue
                if message["data"].startswith(REVOKED_PREFIX):
                    self.end(message["data"][len(REVOKED_PREFIX) :].decode(errors="replace"))
                    continue
                parsed = parse_published(message["data"])
                if parsed is None:
                    continue
                recipient_id, change = parsed
                for listener in list(self._listeners.get(recipient_id, {})):
                    listener.offer(change)


class InboxFollower:
    """One client's changes in order, from its cursor on (see the module documentation)."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        recipient_id: str,
        cursor: dict[int, str],
        readers: asyncio.Semaphore | None = None,
        *,
        replay_entries: int = StreamLimits().replay_entries,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.recipient_id = recipient_id
        self.cursor = cursor
        self.counts: dict[int, tuple[int, int]] = {}
        # Shared by a process's followers (``InboxHub.readers``): who may read Redis now.
        self.readers = readers or asyncio.Semaphore(1)
        # The most entries one catch-up reads from one feed (``StreamLimits.replay_entries``).
        self.replay_entries = replay_entries

    async def start(self, resume: bool) -> bool:
        """Read the counts; without ``resume``, start after each feed's newest entry. Whether
        the feeds still hold everything after the cursor (False: read the inbox again)."""
        async with self.readers:
            return await self._start(resume)

    async def _start(self, resume: bool) -> bool:
        shards = self.keys.all_shards()
        async with self.redis.pipeline(transaction=False) as pipe:
            for shard in shards:
                inbox = shard.inbox(self.recipient_id)
                pipe.hmget(inbox.messages, "unread", "unseen", "feed", "lost")
                pipe.xinfo_stream(inbox.feed)
            replies = await pipe.execute(raise_on_error=False)
        whole = True
        for shard, known, info in zip(shards, replies[::2], replies[1::2], strict=True):
            if isinstance(known, Exception):
                raise known
            unread, unseen, newest, lost = known
            self.counts[shard.shard] = (int(unread or 0), int(unseen or 0))
            feed = info if isinstance(info, dict) else {}  # an error: no feed (any more)
            if not resume:
                last = feed.get("last-entry")
                self.cursor[shard.shard] = last[0].decode() if last else "0-0"
            elif not await self._holds_all_after(shard.shard, feed, _text(newest), _text(lost)):
                whole = False
        return whole

    async def _holds_all_after(
        self, shard: int, feed: dict[str, Any], newest: str, lost: str
    ) -> bool:
        """Whether a feed (as XINFO STREAM tells it) still holds every entry after the
        cursor (see ``_known_whole`` for ``newest`` and ``lost``). Trimming drops the
        oldest entries: nothing after the cursor is gone when the cursor's own entry is
        still there, or nothing was ever trimmed; a cursor of "0-0" (the feed was empty when
        the client looked) needs the latter."""
        seen = self.cursor[shard]
        known = _known_whole(seen, feed, newest, lost)
        if known is not None:
            return known
        oldest = feed.get("first-entry")
        if seen == "0-0" or oldest is None:
            return False
        if entry_order(oldest[0].decode()) <= entry_order(seen):
            return True
        feed_key = self.keys.shard(shard).inbox(self.recipient_id).feed
        return bool(await self.redis.xrange(feed_key, min=seen, max=seen))

    async def catch_up(self) -> list[Change]:
        """Every change the feeds hold after the cursor, oldest first per shard;
        ``FeedOverrun`` when one holds more of them than one re-read takes."""
        async with self.readers:
            return await self._catch_up()

    async def _catch_up(self) -> list[Change]:
        changes: list[Change] = []
        for shard in self.keys.all_shards():
            feed = shard.inbox(self.recipient_id).feed
            entries: list[tuple[bytes, dict[bytes, bytes]]]
            entries = await self.redis.xrange(  # type: ignore[assignment]
                feed, min=f"({self.cursor[shard.shard]}", count=self.replay_entries + 1
            )
            if len(entries) > self.replay_entries:
                raise FeedOverrun
            for entry_id, fields in entries:
                changes.append(_change_of(shard.shard, entry_id.decode(), fields))
        return changes

    def fresh(self, change: Change) -> bool:
        """Whether ``change`` is new to the client; if so the cursor and counts move on."""
        if entry_order(change.entry) <= entry_order(self.cursor.get(change.shard, "0-0")):
            return False
        self.cursor[change.shard] = change.entry
        self.counts[change.shard] = (change.unread, change.unseen)
        return True

    def totals(self) -> tuple[int, int]:
        unread = sum(counts[0] for counts in self.counts.values())
        return unread, sum(counts[1] for counts in self.counts.values())


def _change_of(shard: int, entry: str, fields: dict[bytes, bytes]) -> Change:
    return Change(
        shard, entry, fields[b"k"].decode(), fields[b"id"].decode(), int(fields[b"u"]),
        int(fields[b"s"]), fields[b"b"],
    )  # fmt: skip


def _known_whole(seen: str, feed: dict[str, Any], newest: str, lost: str) -> bool | None:
    """Whether nothing after the cursor ``seen`` is missing, as far as the inbox hash tells
    (``newest``: the newest change ever fed; ``lost``: the last entry of a feed that expired
    before a change made it anew; "" for none, see ``streams/core/shared.lua``'s ``inbox_feed``)
    and the feed's counters; None when only the feed's entries can tell."""
    if newest and entry_order(newest) <= entry_order(seen):
        return True  # nothing came after the cursor
    if lost and entry_order(seen) < entry_order(lost):
        return False  # an expired feed took changes the client had not had
    if not feed:  # a change after the cursor went with its feed; none recorded: none came
        return not newest
    if feed.get("entries-added", 0) == feed.get("length", 0):
        return True  # this feed holds every change since it was made, and nothing was lost
    return None


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value
