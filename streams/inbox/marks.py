"""Marking inbox messages: read, unread, seen, archived, unarchived.

Each action is an event about the message's delivery (``InboxMessageRead`` …), numbered
after the delivery's version; a read moves the delivery to READ, an unread back to SENT.
``changed`` decides what an action changes in a message's state (nothing when it is so
already), and ``inbox_mark_call`` makes the one ``mark.lua`` call that records a shard's
changes, each only if nothing changed meanwhile (``streams.inbox.store.InboxStore.mark``
reads, decides and retries).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from streams.core import codec
from streams.core.events import (
    InboxMessageArchived,
    InboxMessageEvent,
    InboxMessageRead,
    InboxMessageSeen,
    InboxMessageUnarchived,
    InboxMessageUnread,
)
from streams.core.keys import ShardKeys
from streams.core.scripts import Call, KeyOrArg
from streams.delivery.state import DeliveryStatus
from streams.inbox.messages import MessageState, StoredMessage

Action = Literal["read", "unread", "seen", "archive", "unarchive"]


# What each action changes: (the state's attribute, set or clear, the event).
_ACTIONS: Final[dict[Action, tuple[str, bool, type[InboxMessageEvent]]]] = {
    "read": ("read_ms", True, InboxMessageRead),
    "unread": ("read_ms", False, InboxMessageUnread),
    "seen": ("seen_ms", True, InboxMessageSeen),
    "archive": ("archived_ms", True, InboxMessageArchived),
    "unarchive": ("archived_ms", False, InboxMessageUnarchived),
}
_KINDS: Final[dict[Action, str]] = {
    "read": "read", "unread": "unread", "seen": "seen",
    "archive": "archived", "unarchive": "unarchived",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Change:
    """One message's change, ready for ``mark.lua``."""

    message_id: str
    kind: str
    before: MessageState
    after: MessageState
    version_read: str  # the delivery state's version, "" when there was none
    status: DeliveryStatus
    event: bytes

    def arguments(self) -> list[KeyOrArg]:
        unread = int(self.after.unread) - int(self.before.unread)
        unseen = int(self.after.unseen) - int(self.before.unseen)
        return [
            self.message_id, self.kind, self.before.text(), self.after.text(), unread, unseen,
            self.version_read, self.status, self.event,
        ]  # fmt: skip


def changed(
    action: Action,
    stored: StoredMessage,
    recipient_id: str,
    version_read: str,
    now_ms: int,
) -> Change | None:
    """The change ``action`` makes to a message (None: it is so already)."""
    attribute, setting, event_type = _ACTIONS[action]
    state = stored.state
    if bool(getattr(state, attribute)) == setting:
        return None
    version = max(state.version, int(version_read or 0)) + 1
    values = {"read_ms": state.read_ms, "seen_ms": state.seen_ms, "archived_ms": state.archived_ms}
    values[attribute] = now_ms if setting else 0
    after = MessageState(**values, version=version)
    status = DeliveryStatus.READ if after.read_ms else DeliveryStatus.SENT
    message = stored.message
    event = event_type(
        at=datetime.fromtimestamp(now_ms / 1000, UTC),
        notification_id=message.notification_id,
        delivery_id=message.id,
        version=version,
        recipient_id=recipient_id,
        status=status,
    )
    return Change(
        message.id, _KINDS[action], state, after, version_read, status,
        codec.encode_events([event]),
    )  # fmt: skip


def inbox_mark_call(
    shard: ShardKeys,
    recipient_id: str,
    changes: Sequence[Change],
    feed: tuple[int, int],
    live: str,
) -> Call:
    """The keys and arguments of one ``mark.lua`` call; ``feed`` is the feed's
    length and how long (ms) it lives after its newest change."""
    inbox = shard.inbox(recipient_id)
    keys: list[KeyOrArg] = [inbox.messages, inbox.feed, shard.events]
    args: list[KeyOrArg] = [*feed, live, recipient_id]
    for change in changes:
        keys.append(shard.delivery(change.message_id))
        args += change.arguments()
    return keys, args
