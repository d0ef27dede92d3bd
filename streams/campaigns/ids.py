"""How a campaign's notifications are known: the idempotency key each one is ingested under.

A campaign (``app.campaigns``) ingests one ordinary notification per recipient under the key
``campaign:<campaign id>:<recipient id>``, so no recipient can be generated twice, whatever
crashes and restarts the generator goes through. Producers may not use keys with this prefix
themselves (the API refuses them), so the key alone tells a campaign's notifications, and
their deliveries, from all others.
"""

from __future__ import annotations

from typing import Final

CAMPAIGN_KEY_PREFIX: Final = "campaign:"


def notification_key(campaign_id: str, recipient_id: str) -> str:
    """The idempotency key of the campaign's notification to ``recipient_id``."""
    return f"{CAMPAIGN_KEY_PREFIX}{campaign_id}:{recipient_id}"


def campaign_of(idempotency_key: str) -> str:
    """The campaign a notification's idempotency key belongs to; "" for none."""
    if not idempotency_key.startswith(CAMPAIGN_KEY_PREFIX):
        return ""
    campaign_id, colon, _ = idempotency_key[len(CAMPAIGN_KEY_PREFIX) :].partition(":")
    return campaign_id if colon else ""
