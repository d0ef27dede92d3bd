"""What a campaign sends, to whom and how fast: the body of ``POST /v1/campaigns``, kept as
the campaign's spec, and the notification each recipient gets from it.

A campaign's notifications are ordinary ones: the type's channels, templates, priority and
TTL apply, and so do each recipient's profile, preferences, quiet hours and the suppression
list. A campaign without a ``segment`` gets its recipients uploaded
(``POST /v1/campaigns/{id}/recipients``); one with a segment selects every recipient whose
profile attributes match it, when it starts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final

import msgspec

from app.ingest import profiles, requests
from app.ingest.requests import NotificationRequest, Recipient
from streams.core.vocabulary import Channel, Priority

# Recipients one upload may carry (its body stays under a megabyte with ids of 64 bytes).
MAX_UPLOAD: Final = 10_000
MAX_SEGMENT_VALUES: Final = 100
# Recipients a second a campaign may ask for (its generator makes about 30,000 on two cores).
MAX_RATE: Final = 100_000

_Value = profiles.AttributeValue
SegmentValue = (
    _Value | Annotated[list[_Value], msgspec.Meta(min_length=1, max_length=MAX_SEGMENT_VALUES)]
)


class Segment(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Recipients whose profile has every attribute named here with the value given, or one
    of the values a list gives (``{"plan": "pro", "country": ["DE", "AT"]}``)."""

    attributes: Annotated[dict[profiles.AttributeName, SegmentValue], msgspec.Meta(min_length=1)]

    def matches(self, attributes: dict[str, Any]) -> bool:
        """Whether a profile with these attributes is in the segment."""
        for name, wanted in self.attributes.items():
            if name not in attributes:
                return False
            value = attributes[name]
            options = wanted if isinstance(wanted, list) else (wanted,)
            # 1 == True in Python; a segment asking for true must not take the number 1.
            if not any(type(value) is type(o) and value == o for o in options):
                return False
        return True


class CampaignSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/campaigns``."""

    type: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    name: Annotated[str, msgspec.Meta(max_length=200)] = ""
    data: dict[str, Any] = {}
    priority: Priority | None = None
    channels: Annotated[list[Channel], msgspec.Meta(min_length=1, max_length=5)] | None = None
    locale: requests.Locale | None = None
    ttl_seconds: requests.TtlSeconds | None = None
    segment: Segment | None = None
    # When generation may begin (absent: when started).
    start_at: datetime | None = None
    # Recipients a second at most (absent: as fast as the workers go).
    rate: Annotated[int, msgspec.Meta(ge=1, le=MAX_RATE)] | None = None

    def __post_init__(self) -> None:
        if self.start_at is not None and self.start_at.tzinfo is None:
            raise ValueError("start_at: give a time zone offset")
        self.notification("-")  # refuses data a notification may not carry (too deep)

    def notification(self, recipient_id: str) -> NotificationRequest:
        """The notification ``recipient_id`` gets: its addresses come from its profile."""
        return NotificationRequest(
            recipient=Recipient(id=recipient_id),
            type=self.type,
            priority=self.priority,
            channels=self.channels,
            locale=self.locale,
            ttl_seconds=self.ttl_seconds,
            data=self.data,
        )

    @property
    def start_ms(self) -> int:
        return 0 if self.start_at is None else int(self.start_at.timestamp() * 1000)


class Upload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/campaigns/{id}/recipients``."""

    recipients: Annotated[
        list[requests.RecipientId], msgspec.Meta(min_length=1, max_length=MAX_UPLOAD)
    ]


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(CampaignSpec)


def encode(spec: CampaignSpec) -> bytes:
    return _encoder.encode(spec)


def decode(raw: bytes) -> CampaignSpec:
    return _decoder.decode(raw)
