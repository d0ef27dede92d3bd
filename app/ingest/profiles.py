"""A recipient's profile as ingest plans with it: the addresses, locale, time zone and free
attributes Clarion keeps for a recipient (``app.recipients`` changes them), so a notification
may name only ``recipient.id``.

A profile is stored whole in the recipient's settings hash (``streams.recipients.settings``,
field ``pf``), on every shard, so the ingest script sees it with the settings it already
checks: a notification for a recipient with a profile is planned with it (``merged``), the
addresses a request gives overriding the profile's for that notification (an email address
replaces the profile's email address, any push token or target replaces all of the
profile's devices). Addresses take the same shapes as in a notification's ``recipient``.
"""

from __future__ import annotations

import zoneinfo
from typing import Annotated, Final

import msgspec

from app.ingest import requests
from app.ingest.requests import MAX_PUSH_TARGETS, NotificationRequest, PushTarget, Recipient

MAX_ATTRIBUTES: Final = 50
AttributeName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}(?!\n)$")]
AttributeValue = Annotated[str, msgspec.Meta(max_length=256)] | int | float | bool
TimeZone = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class Profile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What is kept about a recipient (``PUT /v1/recipients/{id}``'s body)."""

    # The shapes of a notification's recipient (their patterns are tested with the request's).
    email: requests.Email | None = None
    phone: requests.Phone | None = None
    push_tokens: Annotated[list[requests.PushToken], msgspec.Meta(max_length=MAX_PUSH_TARGETS)] = []
    push_targets: Annotated[list[PushTarget], msgspec.Meta(max_length=MAX_PUSH_TARGETS)] = []
    webhook_url: requests.WebhookUrl | None = None
    locale: requests.Locale | None = None
    # The IANA time zone the recipient lives in (e.g. "Europe/Berlin").
    timezone: TimeZone | None = None
    attributes: dict[AttributeName, AttributeValue] = {}

    def __post_init__(self) -> None:
        if len(self.push_tokens) + len(self.push_targets) > MAX_PUSH_TARGETS:
            raise ValueError(f"push_tokens and push_targets: at most {MAX_PUSH_TARGETS} in all")
        if len(self.attributes) > MAX_ATTRIBUTES:
            raise ValueError(f"attributes: at most {MAX_ATTRIBUTES}")
        if self.timezone is not None:
            try:
                zoneinfo.ZoneInfo(self.timezone)
            except (ValueError, zoneinfo.ZoneInfoNotFoundError):
                raise ValueError(f"timezone: unknown time zone {self.timezone!r}") from None


_decoder = msgspec.json.Decoder(Profile)


def decode(raw: bytes) -> Profile | None:
    """The stored profile, or None for none."""
    return _decoder.decode(raw) if raw else None


def merged(request: NotificationRequest, profile: Profile) -> NotificationRequest:
    """The request with the profile's addresses and locale where the request has none."""
    given = request.recipient
    has_devices = bool(given.push_tokens or given.push_targets)
    recipient = Recipient(
        id=given.id,
        email=given.email if given.email is not None else profile.email,
        phone=given.phone if given.phone is not None else profile.phone,
        push_tokens=given.push_tokens if has_devices else profile.push_tokens,
        push_targets=given.push_targets if has_devices else profile.push_targets,
        webhook_url=given.webhook_url if given.webhook_url is not None else profile.webhook_url,
    )
    locale = request.locale if request.locale is not None else profile.locale
    return msgspec.structs.replace(request, recipient=recipient, locale=locale)
