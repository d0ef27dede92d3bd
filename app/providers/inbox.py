"""The inbox provider: IN_APP deliveries go into Clarion's own inbox (``streams.inbox``).

There is nobody to call: the worker asks this adapter for the delivery's outcome
(``outcome``), which records it SENT and puts its message into the recipient's inbox in one
step. The message is the IN_APP template's title and body, with its ``link`` as the action
URL and its ``data`` for the app.
"""

from __future__ import annotations

from datetime import UTC, datetime

from app.catalog.providers import InboxConfig
from app.providers.base import Message, ProviderError
from streams import delivery_outcomes
from streams.delivery_outcomes import LeasedDelivery
from streams.delivery_store import Outcome
from streams.inbox_messages import InboxMessage
from streams.vocabulary import ErrorClass

_DAY_MS = 86_400_000


class InboxProvider:
    """Clarion's own inbox, as the provider of the IN_APP channel."""

    def __init__(self, name: str, config: InboxConfig) -> None:
        self.name = name
        self.config = config

    def outcome(self, leased: LeasedDelivery, message: Message, now_ms: int) -> Outcome:
        """SENT, with ``message`` in its recipient's inbox."""
        item = leased.item
        stored = InboxMessage(
            id=item.delivery_id,
            notification_id=item.notification_id,
            type=item.notification_type,
            title=message.title,
            body=message.body,
            created_at=datetime.fromtimestamp(now_ms / 1000, UTC),
            action_url=message.push.link,
            data=message.push.data,
        )
        config = self.config
        return delivery_outcomes.sent_to_inbox(
            leased, self.name, stored, now_ms,
            keep=config.keep, ttl_ms=config.keep_days * _DAY_MS,
            feed=config.feed,
        )  # fmt: skip

    async def send(self, message: Message) -> str:
        """Never called: the worker records an inbox delivery through ``outcome``."""
        raise ProviderError(
            ErrorClass.PERMANENT, f"{self.name}: inbox messages are written with their outcome"
        )

    async def close(self) -> None:
        return None
