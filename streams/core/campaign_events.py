"""The events of campaigns (``app.campaigns``), part of the event contract
(``streams.core.events``, which lists them among every event).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from streams.core.event_base import Event
from streams.core.vocabulary import CampaignState


class CampaignCreated(Event, frozen=True, kw_only=True):
    campaign_id: str
    producer: str
    notification_type: str
    # Where its recipients come from: uploaded ids ("list") or a profile segment.
    audience: Literal["list", "segment"]
    start_at: datetime | None = None
    rate: int = 0  # recipients a second (0: as fast as it goes)


class CampaignAudienceAdded(Event, frozen=True, kw_only=True):
    """Recipients added to a campaign: an upload, or the recipients a segment selected."""

    campaign_id: str
    recipients: int
    audience: int  # the audience's size after them


class CampaignStateChanged(Event, frozen=True, kw_only=True):
    campaign_id: str
    state: CampaignState
    previous: CampaignState
    by: str = ""  # the producer that asked, or "generator"


class CampaignBatchGenerated(Event, frozen=True, kw_only=True):
    """A batch of a campaign's recipients turned into notifications."""

    campaign_id: str
    batch: int  # its position in the audience, from 0
    accepted: int  # notifications ingested
    repeated: int  # recipients that already had theirs (listed twice, or a batch run again)
    skipped: int  # recipients refused (no address for the type's channels, ...)
