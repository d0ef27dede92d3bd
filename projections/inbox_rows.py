"""What the read model's inbox history gets from events (``inbox_message`` rows).

``InboxMessageCreated`` inserts a message once; each later change (read, unread, seen,
archived, unarchived) sets or clears its time, guarded by the delivery's version like the
``delivery`` row, so it is applied once and never moves a message backwards. A
``RecipientErased`` deletes the recipient's messages and removes their text from the
events that carried it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import asyncpg
import msgspec

from streams.core.events import (
    AnyEvent,
    InboxMessageArchived,
    InboxMessageCreated,
    InboxMessageEvent,
    InboxMessageRead,
    InboxMessageSeen,
    InboxMessageUnarchived,
    InboxMessageUnread,
    RecipientErased,
)

_INSERT: Final = """
INSERT INTO inbox_message (id, recipient_id, notification_id, type, title, body, action_url,
                           data, created_at, version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10)
ON CONFLICT (id) DO NOTHING
"""
# The column each change sets (to the event's time) or clears.
_COLUMN: Final[dict[type[InboxMessageEvent], tuple[str, bool]]] = {
    InboxMessageRead: ("read_at", True),
    InboxMessageUnread: ("read_at", False),
    InboxMessageSeen: ("seen_at", True),
    InboxMessageArchived: ("archived_at", True),
    InboxMessageUnarchived: ("archived_at", False),
}
_CHANGE: Final = """
UPDATE inbox_message SET {column} = $2, version = $3 WHERE id = $1 AND version < $3
"""
_ERASE: Final = "DELETE FROM inbox_message WHERE recipient_id = $1"
# The fields of an InboxMessageCreated an erasure removes from its event in the history.
REDACTED: Final = ("title", "body", "action_url", "data")
_ERASE_EVENT_TEXT: Final = f"""
UPDATE delivery_event AS e
SET body = e.body {" ".join(f"- '{name}'" for name in REDACTED)}
FROM notification AS n
WHERE n.recipient_id = $1 AND e.notification_id = n.id AND e.type = 'InboxMessageCreated'
"""  # noqa: S608 (REDACTED is a constant)

_json = msgspec.json.Encoder()
_REDACTED_TEXT: Final = {"title": "", "body": ""}


def redacted_inbox_message(raw: str | bytes) -> InboxMessageCreated | None:
    """The event of ``delivery_event`` ``raw`` holds, if it is an ``InboxMessageCreated``
    whose text an erasure removed (``RecipientErased``), with empty text; None if it is
    anything else, an event that decodes as it is or one that does not decode at all."""
    try:
        fields = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    if (
        not isinstance(fields, dict)
        or fields.get("type") != "InboxMessageCreated"
        or any(name in fields for name in REDACTED)
    ):
        return None
    try:
        return msgspec.json.decode(
            _json.encode({**fields, **_REDACTED_TEXT}), type=InboxMessageCreated
        )
    except msgspec.ValidationError:
        return None


@dataclass(slots=True)
class InboxRows:
    """The inbox statements of one batch, in stream order."""

    statements: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def add(self, event: AnyEvent) -> None:
        if isinstance(event, InboxMessageCreated):
            values = (
                event.delivery_id, event.recipient_id, event.notification_id,
                event.notification_type, event.title, event.body, event.action_url,
                _json.encode(event.data).decode(), event.at, event.version,
            )  # fmt: skip
            self.statements.append((_INSERT, values))
        elif isinstance(event, InboxMessageEvent):
            column, setting = _COLUMN[type(event)]
            at = event.at if setting else None
            sql = _CHANGE.format(column=column)
            self.statements.append((sql, (event.delivery_id, at, event.version)))
        elif isinstance(event, RecipientErased):
            self.statements.append((_ERASE, (event.recipient_id,)))
            self.statements.append((_ERASE_EVENT_TEXT, (event.recipient_id,)))

    async def write(self, connection: asyncpg.Connection) -> None:
        """Run the statements within the caller's transaction, in order (a run of the same
        statement in one round trip)."""
        statements = self.statements
        start = 0
        while start < len(statements):
            sql = statements[start][0]
            end = start + 1
            while end < len(statements) and statements[end][0] == sql:
                end += 1
            await connection.executemany(sql, [values for _, values in statements[start:end]])
            start = end
