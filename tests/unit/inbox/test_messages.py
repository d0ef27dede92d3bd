"""Inbox messages as Redis keeps them: their states, their ids, and a page's JSON spliced
from them the way the API's view encodes a message."""

from __future__ import annotations

import msgspec
from redis.asyncio import Redis

from app.inbox.api.routes import message_view
from streams.core import scripts
from streams.inbox.messages import MessageState, StoredMessage, encode, is_message_id, state_json
from tests.unit.inbox.test_marks import MESSAGE


def test_a_state_reads_back_as_it_was_written() -> None:
    state = MessageState(read_ms=5, seen_ms=0, archived_ms=7, version=4)
    assert MessageState.parse(state.text()) == state
    assert MessageState.parse(b"0 0 0 3") == MessageState(version=3)


async def test_the_scripts_read_and_write_a_state_as_python_does(fake: Redis) -> None:
    state = MessageState(read_ms=1_700_000_000_001, seen_ms=0, archived_ms=3, version=12)
    read = scripts.PRELUDE + "\nreturn { inbox_state(ARGV[1]) }"
    assert await fake.eval(read, 0, state.text()) == [1_700_000_000_001, 0, 3, 12]
    new = await fake.eval(scripts.PRELUDE + "\nreturn INBOX_NEW_STATE .. ARGV[1]", 0, 9)
    assert MessageState.parse(new) == MessageState(version=9)
    assert state_json(new) == state_json(b"0 0 0 9")


def test_archived_messages_are_neither_unread_nor_unseen() -> None:
    assert MessageState().unread
    assert MessageState().unseen
    assert not MessageState(archived_ms=1).unread
    assert not MessageState(archived_ms=1).unseen
    assert not MessageState(read_ms=1).unread
    assert MessageState(read_ms=1).unseen


def test_only_a_lower_case_uuid_is_a_message_id() -> None:
    assert is_message_id(MESSAGE.id)
    assert not is_message_id(MESSAGE.id.upper())
    assert not is_message_id("../../" + MESSAGE.id[6:])
    assert not is_message_id("")


def test_a_states_times_are_spliced_as_the_view_encodes_them() -> None:
    assert state_json(b"0 0 0 3") == b',"read_at":null,"seen_at":null,"archived_at":null}'
    spliced = msgspec.json.decode(b"{" + state_json(b"1764547200000 0 1764547201500 9")[1:])
    assert spliced == {
        "read_at": "2025-12-01T00:00:00Z",
        "seen_at": None,
        "archived_at": "2025-12-01T00:00:01.500000Z",
    }
    # A stored message with them is the API's view of it.
    stored = encode(MESSAGE)[:-1] + state_json(b"1764547200000 0 0 4")
    view = message_view(StoredMessage(MESSAGE, MessageState(read_ms=1764547200000, version=4)))
    assert msgspec.json.decode(stored) == msgspec.json.decode(msgspec.json.encode(view))
