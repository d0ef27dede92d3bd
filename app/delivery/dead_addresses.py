"""What a provider's word that an address is dead changes: the recipient's settings remember
it (fan-out then suppresses that address for them, ``invalid_address``), and the address goes
on the suppression list, so no other recipient who gives it is sent to either.

The list's reason follows the channel: a push target is an ``invalid_token``, an email
address a ``hard_bounce`` (an SMTP 5.1.1 or a provider's permanent refusal of the address),
a phone number or a webhook URL an ``invalid_address``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import structlog

from app.recipients.addresses import masked
from streams.core.events import SuppressionReason
from streams.core.vocabulary import Channel
from streams.delivery.work_items import WorkItem
from streams.recipients.settings import AddressDigest, RecipientSettingsStore
from streams.recipients.suppressions import Suppression, SuppressionStore

log = structlog.get_logger(__name__)

REASON_BY_CHANNEL: Final[dict[str, SuppressionReason]] = {
    Channel.PUSH: "invalid_token",
    Channel.EMAIL: "hard_bounce",
}


class DeadAddresses:
    """Records dead addresses for the recipient and on the suppression list."""

    def __init__(
        self,
        settings: RecipientSettingsStore,
        suppressions: SuppressionStore,
        address_digest: AddressDigest,
        now_ms: Callable[[], int],
    ) -> None:
        self.settings = settings
        self.suppressions = suppressions
        self.address_digest = address_digest
        self.now_ms = now_ms

    async def forget(self, item: WorkItem, provider: str) -> None:
        """``provider`` said ``item``'s address is dead: record it in both places. A failure
        is logged, never raised: the delivery's own outcome is recorded regardless."""
        digest = self.address_digest(item.address)
        try:
            await self.settings.mark_address_invalid(item.recipient_id, item.channel, digest)
            await self.suppressions.add(
                Suppression(
                    channel=item.channel,
                    digest=digest,
                    reason=REASON_BY_CHANNEL.get(item.channel, "invalid_address"),
                    source=f"provider:{provider}",
                    at_ms=self.now_ms(),
                    display=masked(item.channel, item.address),
                )
            )
        except Exception:
            log.exception("delivery.mark_invalid_failed", delivery_id=item.delivery_id)
