"""An inbox message as Redis keeps it: the message (JSON in the shape of the API's view of
it), its state (when it was read, seen and archived, and its delivery's version), and the
state's part of the message's JSON, which ``streams.inbox`` splices a page from."""

from __future__ import annotations

from dataclasses import dataclass
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
    """When a message was read, seen and archived (ms; 0: not), and its delivery's version."""

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


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(InboxMessage)
# A state with no time yet (the most common by far): its part of a message's JSON.
_UNTOUCHED = b',"read_at":null,"seen_at":null,"archived_at":null}'


def state_json(state: bytes) -> bytes:
    """The ``read_at``, ``seen_at`` and ``archived_at`` members of a message's JSON, with its
    closing brace, from its stored state (``MessageState``)."""
    if state.startswith(b"0 0 0 "):
        return _UNTOUCHED
    read, seen, archived, _ = state.split()
    return b',"read_at":%s,"seen_at":%s,"archived_at":%s}' % (
        _time_json(read), _time_json(seen), _time_json(archived),
    )  # fmt: skip


def _time_json(ms: bytes) -> bytes:
    if ms == b"0":
        return b"null"
    return _encoder.encode(datetime.fromtimestamp(int(ms) / 1000, UTC))


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
