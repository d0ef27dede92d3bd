"""An inbox message as Redis keeps it: the message (JSON in the shape of the API's view of
it), its state (when it was read, seen and archived, and its delivery's version), and the
state's part of the message's JSON, which ``streams.inbox.store`` splices a page from."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Final

import msgspec


class InboxMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message as the inbox keeps it: the fields of the API's view of a message, in its
    order, so a page is the stored messages spliced with their states' times
    (``page_json``); the times come from the state field."""

    id: str  # its delivery's id
    notification_id: str
    type: str  # the notification type
    title: str
    body: str
    action_url: str = ""
    data: dict[str, str] = {}
    created_at: datetime


@dataclass(frozen=True, slots=True)
class MessageState:
    """When a message was read, seen and archived (ms; 0: not), and its delivery's version.

    Stored as its four numbers in this order, separated by one space (``text``, ``parse``:
    the one encoder and decoder). The Lua scripts read and write it with the pattern and
    the new message's prefix below, which ``streams.core.scripts`` writes into them.
    """

    read_ms: int = 0
    seen_ms: int = 0
    archived_ms: int = 0
    version: int = 0

    @classmethod
    def parse(cls, text: bytes | str) -> MessageState:
        read, seen, archived, version = (int(part) for part in text.split())
        return cls(read, seen, archived, version)

    def text(self) -> str:
        return f"{self.read_ms} {self.seen_ms} {self.archived_ms} {self.version}"

    @property
    def unread(self) -> bool:
        return not self.read_ms and not self.archived_ms

    @property
    def unseen(self) -> bool:
        return not self.seen_ms and not self.archived_ms


@dataclass(frozen=True, slots=True)
class StoredMessage:
    message: InboxMessage
    state: MessageState


# A new message's state, but for its version: what the scripts put in front of it.
NEW_STATE_PREFIX: Final = MessageState().text().removesuffix("0")
# The Lua pattern whose captures are a state's numbers, in ``MessageState``'s order.
STATE_PATTERN: Final = "^" + " ".join(["(%d+)"] * len(fields(MessageState))) + "$"

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(InboxMessage)
# A state with no time yet (the most common by far): its part of a message's JSON.
_UNTOUCHED = b',"read_at":null,"seen_at":null,"archived_at":null}'
_UNTOUCHED_STATE: Final = NEW_STATE_PREFIX.encode()


def state_json(state: bytes) -> bytes:
    """The ``read_at``, ``seen_at`` and ``archived_at`` members of a message's JSON, with its
    closing brace, from its stored state (``MessageState``)."""
    if state.startswith(_UNTOUCHED_STATE):
        return _UNTOUCHED
    parsed = MessageState.parse(state)
    return b',"read_at":%s,"seen_at":%s,"archived_at":%s}' % (
        _time_json(parsed.read_ms), _time_json(parsed.seen_ms), _time_json(parsed.archived_ms),
    )  # fmt: skip


def _time_json(ms: int) -> bytes:
    if not ms:
        return b"null"
    return _encoder.encode(datetime.fromtimestamp(ms / 1000, UTC))


_HEX: Final = frozenset("0123456789abcdef")


def is_message_id(text: str) -> bool:
    """Whether ``text`` has the shape of a message id (a delivery id: a lower-case UUID)."""
    return (
        len(text) == 36
        and all(text[at] == "-" for at in (8, 13, 18, 23))
        and set(text.replace("-", "")) <= _HEX
    )


def encode(message: InboxMessage) -> bytes:
    return _encoder.encode(message)


def decode(raw: bytes | str) -> InboxMessage:
    return _decoder.decode(raw)
