"""What the read model's digests get from events (``digest`` and ``digest_member`` rows).

``NotificationDigested`` opens a digest's row the first time (later joins raise its item
count) and records which digest the notification joined; ``DigestClosed`` marks the digest
closed with its final count and the notification made of it. Every statement is an upsert
that neither repetition nor a second projection of the same batch can change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import asyncpg

from streams.core.events import AnyEvent, DigestClosed, NotificationDigested

_JOINED: Final = """
INSERT INTO digest AS g (id, recipient_id, notification_type, opened_at, closes_at, items)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO UPDATE SET
    opened_at = LEAST(g.opened_at, EXCLUDED.opened_at),
    items = CASE WHEN g.closed_at IS NULL THEN GREATEST(g.items, EXCLUDED.items) ELSE g.items END
"""
_MEMBER: Final = """
INSERT INTO digest_member (notification_id, digest_id, joined_at) VALUES ($1, $2, $3)
ON CONFLICT (notification_id) DO NOTHING
"""
# A close seen before any join (its joins' events older than the history kept) still makes
# the row, opened and closing when it closed.
_CLOSED: Final = """
INSERT INTO digest AS g (id, recipient_id, notification_type, opened_at, closes_at, items,
                         closed_at, notification_id)
VALUES ($1, $2, $3, $4, $4, $5, $4, $6)
ON CONFLICT (id) DO UPDATE SET
    items = EXCLUDED.items,
    closed_at = COALESCE(g.closed_at, EXCLUDED.closed_at),
    notification_id = COALESCE(g.notification_id, EXCLUDED.notification_id)
"""


@dataclass(slots=True)
class DigestRows:
    """The digest statements of one batch, in stream order."""

    statements: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    # Who joined which digest: independent of the digests' rows and of each other.
    members: list[tuple[Any, ...]] = field(default_factory=list)

    def add(self, event: AnyEvent) -> None:
        if isinstance(event, NotificationDigested):
            self.statements.append((
                _JOINED,
                (event.digest_id, event.recipient_id, event.notification_type, event.at,
                 event.closes_at, event.count),
            ))  # fmt: skip
            self.members.append((event.notification_id, event.digest_id, event.at))
        elif isinstance(event, DigestClosed):
            self.statements.append((
                _CLOSED,
                (event.digest_id, event.recipient_id, event.notification_type, event.at,
                 event.count, event.notification_id or None),
            ))  # fmt: skip

    async def write(self, connection: asyncpg.Connection) -> None:
        """Run the statements within the caller's transaction, in order (a run of the same
        statement in one round trip), then the memberships in one."""
        statements = self.statements
        start = 0
        while start < len(statements):
            sql = statements[start][0]
            end = start + 1
            while end < len(statements) and statements[end][0] == sql:
                end += 1
            await connection.executemany(sql, [values for _, values in statements[start:end]])
            start = end
        if self.members:
            await connection.executemany(_MEMBER, self.members)
