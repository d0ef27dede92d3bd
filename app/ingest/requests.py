"""What a producer asks ingest for: a notification request, and the answer it gets (202).

These shapes are the HTTP API's request and answer bodies too (``app.api`` documents them
as such), but they belong to ingest: fan-out and the ingestor work on them, never on HTTP
types.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any

import msgspec

from app.catalog.push import Platform, subscription_address, token_address
from streams.core.records import DeliveryAtAcceptance
from streams.core.vocabulary import Channel, Priority

# Template variables are free-form, but what is accepted is encoded again (the fingerprint,
# the shared template data) and read by the renderer, each recursively: far below where
# recursion gives up, objects and arrays may nest this deep, ``data`` itself the first level.
MAX_DATA_DEPTH = 32
DIGEST_ITEM_DEPTH = MAX_DATA_DEPTH - 2  # a digest type's: see ``digest_data_error``

# msgspec checks max_length before pattern, but no pattern here leans on it: each is anchored
# and no quantifier competes with what follows it for a character, so each character is
# read a bounded number of times (Phone and Locale, without a length limit, repeat a bounded
# number of times). Email's domain, "a dot with something before and after it", is written
# as "a character, then no dot up to the first dot": the same addresses, where the obvious
# ``[^@\s]+\.[^@\s]+`` tries the rest of the domain from every dot in it (0.7 ms for 254
# dots, and a batch may hold a thousand of them). Each ends in ``(?!\n)$``: a plain ``$`` also
# matches before a final newline, and "+4915112345678\n" would pass for a phone number.
RecipientId = Annotated[
    str, msgspec.Meta(min_length=1, max_length=255, pattern=r"^[^\x00-\x20\x7f]+(?!\n)$")
]
Email = Annotated[
    str, msgspec.Meta(max_length=254, pattern=r"^[^@\s]+@[^@\s][^@\s.]*\.[^@\s]+(?!\n)$")
]
# E.164: a plus, a country code that does not start with 0, at most 15 digits in all.
Phone = Annotated[str, msgspec.Meta(pattern=r"^\+[1-9][0-9]{6,14}(?!\n)$")]
PushToken = Annotated[
    str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^[^\x00-\x20\x7f]+(?!\n)$")
]
# An absolute http(s) URL of printable ASCII (an international host name is written in its
# xn-- form, as the webhook adapter requires); whether it may be called (https, no private
# address) is checked when it is called, against what it resolves to.
WebhookUrl = Annotated[
    str, msgspec.Meta(max_length=2048, pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://[!-~]+(?!\n)$")
]
Locale = Annotated[str, msgspec.Meta(pattern=r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8}){0,2}(?!\n)$")]
# A Web Push subscription's endpoint: an https URL of printable ASCII without spaces (whether
# it may be called is checked when it is, as for webhook URLs).
PushEndpoint = Annotated[
    str, msgspec.Meta(max_length=2048, pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://[!-~]+(?!\n)$")
]
# A subscription key, base64url as ``PushSubscription.toJSON()`` writes it (p256dh: 65
# bytes, 87 characters; auth: 16 bytes, 22 characters; padding allowed).
PushKey = Annotated[
    str, msgspec.Meta(min_length=16, max_length=128, pattern=r"^[A-Za-z0-9_-]+={0,2}(?!\n)$")
]
TtlSeconds = Annotated[int, msgspec.Meta(ge=1, le=30 * 86400)]
# RFC 3339 with its offset: a time without one names no moment.
SendAt = Annotated[datetime, msgspec.Meta(tz=True)]
# Seconds, or an ISO 8601 duration (``app.ingest.schedule``); how far ahead is checked there.
Delay = Annotated[float, msgspec.Meta(ge=0)] | Annotated[str, msgspec.Meta(max_length=64)]
# A producer's own name for notifications it may want to take back together (an order id):
# printable ASCII without spaces.
CancellationKey = Annotated[
    str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[!-~]+(?!\n)$")
]
MAX_PUSH_TARGETS = 20
# An APNs device token: 64 hex digits today; Apple says they may grow, so up to 200.
ApnsToken = Annotated[
    str, msgspec.Meta(min_length=64, max_length=200, pattern=r"^[0-9A-Fa-f]+(?!\n)$")
]


class FcmTarget(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="platform", tag="fcm"
):
    """An FCM registration token."""

    token: PushToken


class ApnsTarget(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="platform", tag="apns"
):
    """An APNs device token."""

    token: ApnsToken


class SubscriptionKeys(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    p256dh: PushKey
    auth: PushKey


class WebPushTarget(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    tag_field="platform",
    tag="webpush",
    rename={"expiration_time": "expirationTime"},
):
    """A browser's ``PushSubscription.toJSON()``, with ``"platform": "webpush"``."""

    endpoint: PushEndpoint
    keys: SubscriptionKeys
    # Milliseconds since the epoch when the subscription ends, or null (most browsers).
    expiration_time: int | None = None


PushTarget = FcmTarget | ApnsTarget | WebPushTarget


def target_address(target: PushTarget) -> str:
    """The delivery address of a push target (``app.catalog.push``)."""
    if isinstance(target, WebPushTarget):
        return subscription_address(target.endpoint, target.keys.p256dh, target.keys.auth)
    platform = Platform.FCM if isinstance(target, FcmTarget) else Platform.APNS
    return token_address(platform, target.token)


class Recipient(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: RecipientId
    email: Email | None = None
    phone: Phone | None = None
    # Tokens of the PUSH channel's default platform (``default_platform``).
    push_tokens: Annotated[list[PushToken], msgspec.Meta(max_length=20)] = []
    webhook_url: WebhookUrl | None = None
    # Devices with their platform; with ``push_tokens`` at most 20 in all.
    push_targets: Annotated[list[PushTarget], msgspec.Meta(max_length=20)] = []

    def __post_init__(self) -> None:
        if len(self.push_tokens) + len(self.push_targets) > MAX_PUSH_TARGETS:
            raise ValueError(
                f"push_tokens and push_targets: at most {MAX_PUSH_TARGETS} devices in all"
            )


class NotificationRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/notifications``."""

    recipient: Recipient
    type: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    priority: Priority | None = None
    channels: Annotated[list[Channel], msgspec.Meta(min_length=1, max_length=5)] | None = None
    locale: Locale | None = None
    ttl_seconds: TtlSeconds | None = None
    data: dict[str, Any] = {}
    # Send later: at this time, or after this delay (one of them; ``app.ingest.schedule``).
    # The TTL counts from then.
    send_at: SendAt | None = None
    delay: Delay | None = None
    # ``POST /v1/cancellations`` with this key cancels every delivery of the producer's
    # notifications carrying it that has not gone to a provider yet.
    cancellation_key: CancellationKey | None = None

    def __post_init__(self) -> None:
        """Refuse ``data`` nested deeper than ``MAX_DATA_DEPTH`` (msgspec: a 422 naming it)."""
        # Every notification comes through here, so flat data costs only a look at each
        # value's type, no call: 1,300 instructions for one value, of the 211,000 that ingest
        # takes per notification (bench/instructions.py).
        for value in self.data.values():
            if type(value) in _CONTAINERS and _nests_deeper((value,), MAX_DATA_DEPTH - 1):
                raise ValueError(
                    f"data: objects and arrays nest at most {MAX_DATA_DEPTH} levels deep"
                )


def digest_data_error(data: dict[str, Any]) -> str:
    """Why a notification of a digest type cannot have ``data`` ("" when it can): its
    digest's notification holds it in ``items`` (an array of objects), two levels deeper,
    within ``MAX_DATA_DEPTH`` like any other."""
    for value in data.values():
        if type(value) in _CONTAINERS and _nests_deeper((value,), DIGEST_ITEM_DEPTH - 1):
            return (
                f"data: a notification of a digest type nests objects and arrays at most "
                f"{DIGEST_ITEM_DEPTH} levels deep (its digest's notification holds it in "
                f"items, two levels deeper)"
            )
    return ""


_CONTAINERS = frozenset((dict, list))  # what JSON's objects and arrays decode to


def _nests_deeper(values: Iterable[Any], levels: int) -> bool:
    """Whether an object or array among ``values`` nests more than ``levels`` levels deep;
    scalars are passed over, only containers walked into."""
    for value in values:
        kind = type(value)
        if kind is dict:
            if levels == 0 or _nests_deeper(value.values(), levels - 1):
                return True
        elif kind is list and (levels == 0 or _nests_deeper(value, levels - 1)):
            return True
    return False


class Accepted(msgspec.Struct, frozen=True, omit_defaults=True):
    """202 answer: the notification id and one entry per delivery (with the reason when it
    was suppressed or expired at once, or waits for an address)."""

    id: str
    deliveries: list[DeliveryAtAcceptance]
    # A notification of a digest type: the digest it joined (its deliveries are DIGESTED).
    digest: JoinedDigest | None = None


class JoinedDigest(msgspec.Struct, frozen=True):
    """The digest a notification joined: its id, how many it holds with this one, and when
    it closes (sooner when it fills up)."""

    id: str
    count: int
    closes_ms: int  # ms since the epoch, as a delivery's ``due_ms``
