"""Recipients' inboxes in Redis: the messages IN_APP deliveries leave, what recipients do
with them, and the feed of changes a realtime client follows.

An IN_APP delivery sent through the ``inbox`` provider writes its message in the same
script that records it SENT (``streams/delivery/finish.lua``, from ``InboxWrite``), on the
delivery's shard: a recipient's messages are spread over the shards their notifications
went to, and a page is the newest of each shard's, merged. Per recipient and shard
(``streams.core.keys.InboxKeys``): a hash of the messages and their states with the unread and
unseen counts, the message ids in order (UUIDv7 delivery ids, so newest last), and a capped
stream of changes. Only the newest messages stay (``keep``), for a while (``ttl_ms``); the
read model keeps the whole history (``InboxMessageCreated`` carries the message).

Reading, unreading, seeing and archiving a message are events about its delivery
(``InboxMessageRead`` …), numbered after the delivery's version; a read moves the delivery
to READ, an unread back to SENT. ``InboxStore.mark`` reads a message's state, decides the
change (``streams.inbox.marks``), and records it with ``mark.lua`` only if nothing changed
meanwhile.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from redis.asyncio import Redis

from streams.core import scripts
from streams.core.batching import BatchedScript
from streams.core.errors import Conflict
from streams.core.keys import InboxKeys, KeySpace, ShardKeys, shard_from_id
from streams.core.scripts import KeyOrArg
from streams.inbox.marks import Action, Change, changed, inbox_mark_call
from streams.inbox.messages import (
    InboxMessage,
    MessageState,
    StoredMessage,
    decode,
    encode,
    is_message_id,
    state_json,
)
from streams.inbox.pages import Listing, PageAsk, inbox_page_call
from streams.inbox.revocation import REVOKED_PAGE, TokensRevoked, revoked

# Defaults of the ``inbox`` provider: messages kept per recipient and shard, for how long,
# and the changes a realtime client can resume from, for how long after the last one.
KEEP: Final = 200
TTL_MS: Final = 30 * 86400 * 1000
FEED_LENGTH: Final = 1000
FEED_TTL_MS: Final = 3600 * 1000
# Tries of a change that met another one made meanwhile.
_TRIES: Final = 5


@dataclass(frozen=True, slots=True)
class Counts:
    unread: int
    unseen: int


@dataclass(frozen=True, slots=True)
class Page:
    """Messages newest first, whether older ones follow, and the inbox's counts."""

    messages: list[StoredMessage]
    more: bool
    counts: Counts


@dataclass(frozen=True, slots=True)
class JsonPage:
    """A page as the API answers it: the messages as one JSON array (each stored message
    with its ``read_at``, ``seen_at`` and ``archived_at``), the last one's id when older ones
    follow (else ""), and the counts."""

    messages: bytes
    next: str
    counts: Counts


@dataclass(frozen=True, slots=True)
class InboxWrite:
    """A message an outcome puts into its recipient's inbox (``streams/delivery/finish.lua``)."""

    keys: InboxKeys
    message: InboxMessage
    version: int  # the delivery's version after the outcome
    recipient_id: str
    live: str  # the Pub/Sub channel
    keep: int = KEEP
    ttl_ms: int = TTL_MS
    feed_length: int = FEED_LENGTH
    feed_ttl_ms: int = FEED_TTL_MS

    def arguments(self) -> list[KeyOrArg]:
        """Its arguments, after its keys' position (see the script)."""
        return [
            self.message.id, encode(self.message), self.version, self.keep, self.ttl_ms,
            self.feed_length, self.feed_ttl_ms, self.live, self.recipient_id,
        ]  # fmt: skip


class InboxStore:
    """Reads and changes recipients' inboxes across every shard."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        feed_length: int = FEED_LENGTH,
        feed_ttl_ms: int = FEED_TTL_MS,
        on_read: OnRead | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        # Told of the messages each read marked read, once recorded (their notifications'
        # escalation steps: ``app.inbox.read_steps``).
        self.on_read = on_read
        self.feed_length = feed_length
        self.feed_ttl_ms = feed_ttl_ms
        # Concurrent requests' pages of one shard share a script call, and every shard's
        # calls a pipeline: under load one round trip serves many readers.
        self._pages: BatchedScript[ShardKeys, PageAsk, list[bytes]] = BatchedScript(
            redis,
            scripts.INBOX_PAGE,
            group_of=lambda ask: ask.shard,
            build=lambda _, asks: inbox_page_call(asks),
            parse=lambda reply: reply,
        )

    async def page(
        self, recipient_id: str, *, before: str = "", limit: int = 20, listing: Listing = "inbox"
    ) -> Page:
        """The newest ``limit`` messages older than message ``before`` ("": the newest)."""
        rows, counts = await self._rows(recipient_id, before, limit + 1, listing, None)
        found = [
            StoredMessage(decode(message), MessageState.parse(state)) for _, message, state in rows
        ]
        return Page(found[:limit], len(found) > limit, counts)

    async def page_json(
        self,
        recipient_id: str,
        epoch: int,
        *,
        before: str = "",
        limit: int = 20,
        listing: Listing = "inbox",
    ) -> JsonPage:
        """``page`` as the API answers it, spliced from the stored JSON (nothing decoded), for
        a token of ``epoch``: ``TokensRevoked`` if it was revoked."""
        rows, counts = await self._rows(recipient_id, before, limit + 1, listing, epoch)
        shown = rows[:limit]
        parts = [message[:-1] + state_json(state) for _, message, state in shown]
        following = shown[-1][0].decode() if len(rows) > limit else ""
        return JsonPage(b"[" + b",".join(parts) + b"]", following, counts)

    async def _rows(
        self, recipient_id: str, before: str, limit: int, listing: Listing, epoch: int | None
    ) -> tuple[list[tuple[bytes, bytes, bytes]], Counts]:
        """Up to ``limit`` (id, message, state) over every shard, newest first, and the
        counts; the recipient's home shard checks a token's ``epoch`` (None: no token)."""
        home = self.keys.home_of_recipient(recipient_id).shard
        asks = [
            PageAsk(
                shard, recipient_id, before, limit, listing, epoch if shard.shard == home else None
            )
            for shard in self.keys.all_shards()
        ]
        replies = await self._pages.run(asks)
        if any(reply[0] == REVOKED_PAGE for reply in replies):
            raise TokensRevoked
        rows: list[tuple[bytes, bytes, bytes]] = []
        unread = unseen = 0
        for reply in replies:
            unread += int(reply[0])
            unseen += int(reply[1])
            rows += zip(reply[2::3], reply[3::3], reply[4::3], strict=True)
        if len(replies) > 1:
            rows.sort(reverse=True)  # by id: UUIDv7, so newest first
        return rows[:limit], Counts(unread, unseen)

    async def counts(self, recipient_id: str, epoch: int | None = None) -> Counts:
        """The unread and unseen messages (archived ones count for neither); for a token of
        ``epoch``, ``TokensRevoked`` if it was revoked."""
        _, counts = await self._rows(recipient_id, "", 0, "inbox", epoch)
        return counts

    async def message(self, recipient_id: str, message_id: str) -> StoredMessage | None:
        """One message of the recipient's (None: not in the inbox, or not theirs)."""
        shard = self._shard_of(message_id)
        if shard is None:
            return None
        stored, _ = await self._read(shard, recipient_id, [message_id])
        return stored[0]

    async def mark(
        self,
        recipient_id: str,
        message_id: str,
        action: Action,
        now_ms: int,
        epoch: int | None = None,
    ) -> StoredMessage | None:
        """Do ``action`` to one message; the message as it is after (None: not there). For
        a token of ``epoch``, ``TokensRevoked`` if it was revoked."""
        shard = self._shard_of(message_id)
        if shard is None:
            await self._read(self.keys.shard(0), recipient_id, [], epoch)
            return None
        for _ in range(_TRIES):
            [stored], [version] = await self._read(shard, recipient_id, [message_id], epoch)
            if stored is None:
                return None
            change = changed(action, stored, recipient_id, version, now_ms)
            if change is None:
                return stored
            [reply] = await self._record(shard, recipient_id, [change])
            if reply == "GONE":
                return None
            if reply == "OK":
                if action == "read" and self.on_read is not None:
                    await self.on_read(shard, [stored.message])
                return StoredMessage(stored.message, change.after)
        raise InboxBusy(message_id)

    async def read_all(self, recipient_id: str, now_ms: int, epoch: int | None = None) -> int:
        """Mark every unread message read; how many were. For a token of ``epoch``,
        ``TokensRevoked`` if it was revoked."""
        marked = 0
        for shard in self.keys.all_shards():
            for _ in range(_TRIES):
                order = shard.inbox(recipient_id).order
                message_ids = [_text(raw) for raw in await self.redis.zrange(order, 0, -1)]
                stored, versions = await self._read(shard, recipient_id, message_ids, epoch)
                unread = [
                    (found, change)
                    for found, version in zip(stored, versions, strict=True)
                    if found is not None and found.state.unread
                    if (change := changed("read", found, recipient_id, version, now_ms))
                ]
                changes = [change for _, change in unread]
                replies = await self._record(shard, recipient_id, changes) if changes else []
                marked += replies.count("OK")
                read = [
                    found.message
                    for (found, _), reply in zip(unread, replies, strict=True)
                    if reply == "OK"
                ]
                if read and self.on_read is not None:
                    await self.on_read(shard, read)
                if "MOVED" not in replies:
                    break
        return marked

    def _shard_of(self, message_id: str) -> ShardKeys | None:
        """The shard a message id names (None: it names none of this deployment's)."""
        if not is_message_id(message_id):
            return None
        shard = shard_from_id(message_id)
        return self.keys.shard(shard) if shard < self.keys.shards else None

    async def _read(
        self,
        shard: ShardKeys,
        recipient_id: str,
        message_ids: Sequence[str],
        epoch: int | None = None,
    ) -> tuple[list[StoredMessage | None], list[str]]:
        """Each message with its state (None: not there) and its delivery state's version
        ("" when the state hash is gone); ``TokensRevoked`` first if a token of ``epoch``
        (None: none) was revoked, read in the same round trip."""
        inbox = shard.inbox(recipient_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            if epoch is not None:
                pipe.get(self.keys.home_of_recipient(recipient_id).inbox(recipient_id).revoked)
            for message_id in message_ids:
                pipe.hmget(inbox.messages, f"m:{message_id}", f"f:{message_id}")
                pipe.hget(shard.delivery(message_id), "version")
            replies = await pipe.execute()
        if epoch is not None:
            if revoked(replies[0], epoch):
                raise TokensRevoked
            replies = replies[1:]
        stored: list[StoredMessage | None] = []
        versions: list[str] = []
        for (message, state), version in zip(replies[::2], replies[1::2], strict=True):
            found = message is not None and state is not None
            stored.append(
                StoredMessage(decode(message), MessageState.parse(state)) if found else None
            )
            versions.append(version.decode() if version else "")
        return stored, versions

    async def _record(
        self, shard: ShardKeys, recipient_id: str, changes: Sequence[Change]
    ) -> list[str]:
        call = inbox_mark_call(
            shard, recipient_id, changes, (self.feed_length, self.feed_ttl_ms), self.keys.inbox_live
        )
        return [reply.decode() for reply in await scripts.INBOX_MARK(self.redis, *call)]


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


# Told of messages just read: the shard and the messages; answers how many steps it moved.
OnRead = Callable[[ShardKeys, Sequence[InboxMessage]], Awaitable[int]]


class InboxBusy(Conflict):
    """A message kept changing while it was being marked (other changes won each time)."""
