"""The change each action makes to an inbox message, and the event it records."""

from __future__ import annotations

from datetime import UTC, datetime

from streams.core import codec
from streams.core.events import InboxMessageArchived, InboxMessageRead
from streams.inbox.marks import changed
from streams.inbox.messages import InboxMessage, MessageState, StoredMessage

MESSAGE = InboxMessage(
    id="019bc123-4567-7abc-8def-0123456789a0",
    notification_id="019bc123-4567-7abc-8def-0123456789ab",
    type="order_shipped", title="t", body="b", created_at=datetime(2026, 12, 1, tzinfo=UTC),
)  # fmt: skip


def test_a_read_is_numbered_after_the_newer_of_the_two_versions() -> None:
    stored = StoredMessage(MESSAGE, MessageState(version=3))
    change = changed("read", stored, "u-1", "5", 2_000)
    assert change is not None
    assert change.after == MessageState(read_ms=2_000, version=6)
    [event] = codec.decode_events(change.event)
    assert isinstance(event, InboxMessageRead)
    assert (event.version, event.status, event.recipient_id) == (6, "READ", "u-1")
    # Without a delivery state hash (it expired), the message's own version counts.
    again = changed("read", stored, "u-1", "", 2_000)
    assert again is not None
    assert again.after.version == 4


def test_an_action_already_done_changes_nothing() -> None:
    read = StoredMessage(MESSAGE, MessageState(read_ms=1, version=3))
    assert changed("read", read, "u-1", "3", 2_000) is None
    assert changed("unarchive", read, "u-1", "3", 2_000) is None


def test_archiving_a_read_message_keeps_it_read() -> None:
    read = StoredMessage(MESSAGE, MessageState(read_ms=1, seen_ms=1, version=3))
    change = changed("archive", read, "u-1", "3", 2_000)
    assert change is not None
    [event] = codec.decode_events(change.event)
    assert isinstance(event, InboxMessageArchived)
    assert event.status == "READ"
    assert change.arguments()[4:6] == [0, 0]  # read and seen already: no count changes
