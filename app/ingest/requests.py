"""What a producer asks ingest for: a notification request, and the answer it gets (202).

These shapes are the HTTP API's request and answer bodies too (``app.api`` documents them
as such), but they belong to ingest: fan-out and the ingestor work on them, never on HTTP
types.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from streams.records import DeliveryAtAcceptance
from streams.vocabulary import Channel, Priority

RecipientId = Annotated[
    str, msgspec.Meta(min_length=1, max_length=255, pattern=r"^[^\x00-\x20\x7f]+$")
]
Email = Annotated[str, msgspec.Meta(max_length=254, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]
# E.164: a plus, a country code that does not start with 0, at most 15 digits in all.
Phone = Annotated[str, msgspec.Meta(pattern=r"^\+[1-9][0-9]{6,14}$")]
PushToken = Annotated[
    str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^[^\x00-\x20\x7f]+$")
]
Locale = Annotated[str, msgspec.Meta(pattern=r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8}){0,2}$")]
TtlSeconds = Annotated[int, msgspec.Meta(ge=1, le=30 * 86400)]


class Recipient(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: RecipientId
    email: Email | None = None
    phone: Phone | None = None
    push_tokens: Annotated[list[PushToken], msgspec.Meta(max_length=20)] = []


class NotificationRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/notifications``."""

    recipient: Recipient
    type: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    priority: Priority | None = None
    channels: Annotated[list[Channel], msgspec.Meta(min_length=1, max_length=4)] | None = None
    locale: Locale | None = None
    ttl_seconds: TtlSeconds | None = None
    data: dict[str, Any] = {}


class Accepted(msgspec.Struct, frozen=True):
    """202 answer: the notification id and one entry per delivery (with the reason when it
    was suppressed or expired at once)."""

    id: str
    deliveries: list[DeliveryAtAcceptance]
