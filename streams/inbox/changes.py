"""One inbox change as the API's realtime streams hand it on, and the cursor a client names
what it has seen with: per shard, the last feed entry it got (``streams.inbox.live``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

SEPARATOR: Final = "\x1f"
# Either number of a stream entry id is an unsigned 64-bit integer.
_MAX_ENTRY_PART: Final = 2**64 - 1


@dataclass(frozen=True, slots=True)
class Change:
    """One inbox change: its shard and feed entry, what happened ("new", "read", "unread",
    "seen", "archived", "unarchived"), to which message, the shard's counts after it, and
    the message (for "new") or its state text."""

    shard: int
    entry: str
    kind: str
    message_id: str
    unread: int
    unseen: int
    body: bytes


def entry_order(entry: str) -> tuple[int, int]:
    """A stream entry id as comparable numbers ("0-0" for none)."""
    ms, _, sequence = entry.partition("-")
    return int(ms or 0), int(sequence or 0)


def format_cursor(cursor: dict[int, str]) -> str:
    """``0:1700000000000-0,3:…``: the shards with an entry seen, in order."""
    return ",".join(f"{shard}:{entry}" for shard, entry in sorted(cursor.items()) if entry != "0-0")


def parse_cursor(text: str, shards: int) -> dict[int, str] | None:
    """A cursor as ``format_cursor`` writes it; None when it is not one of this deployment
    (then the client starts afresh)."""
    cursor = dict.fromkeys(range(shards), "0-0")
    if not text:
        return cursor
    if len(text) > 40 * shards:
        return None
    for part in text.split(","):
        shard, _, entry = part.partition(":")
        ms, dash, sequence = entry.partition("-")
        if not (_decimal(shard) and _decimal(ms) and dash and _decimal(sequence)):
            return None
        if int(shard) >= shards or max(int(ms), int(sequence)) > _MAX_ENTRY_PART:
            return None  # Redis would refuse it as a stream id
        cursor[int(shard)] = f"{int(ms)}-{int(sequence)}"
    return cursor


def parse_published(payload: bytes) -> tuple[str, Change] | None:
    """The recipient and change of a published payload (None: not one)."""
    parts = payload.split(SEPARATOR.encode(), 7)
    if len(parts) != 8:
        return None
    recipient, feed, entry, kind, message_id, unread, unseen, body = parts
    shard = _shard_of_feed(feed.decode(errors="replace"))
    if shard is None:
        return None
    change = Change(
        shard, entry.decode(), kind.decode(), message_id.decode(), int(unread), int(unseen), body
    )
    return recipient.decode(errors="replace"), change


def _shard_of_feed(feed: str) -> int | None:
    start = feed.find(":{s")
    end = feed.find("}", start)
    if start < 0 or end < 0 or not feed[start + 3 : end].isdigit():
        return None
    return int(feed[start + 3 : end])


def _decimal(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes "²", which ``int`` refuses."""
    return text.isascii() and text.isdigit()
