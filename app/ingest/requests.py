"""What a producer asks ingest for: a notification request, and the answer it gets (202).

These shapes are the HTTP API's request and answer bodies too (``app.api`` documents them
as such), but they belong to ingest: fan-out and the ingestor work on them, never on HTTP
types.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import msgspec

from streams.records import DeliveryAtAcceptance
from streams.vocabulary import Channel, Priority

# Template variables are free-form, but what is accepted is encoded again (the fingerprint,
# the shared template data) and read by the renderer, each recursively: far below where
# recursion gives up, objects and arrays may nest this deep, ``data`` itself the first level.
MAX_DATA_DEPTH = 32

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
TtlSeconds = Annotated[int, msgspec.Meta(ge=1, le=30 * 86400)]


class Recipient(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: RecipientId
    email: Email | None = None
    phone: Phone | None = None
    push_tokens: Annotated[list[PushToken], msgspec.Meta(max_length=20)] = []
    webhook_url: WebhookUrl | None = None


class NotificationRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/notifications``."""

    recipient: Recipient
    type: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    priority: Priority | None = None
    channels: Annotated[list[Channel], msgspec.Meta(min_length=1, max_length=5)] | None = None
    locale: Locale | None = None
    ttl_seconds: TtlSeconds | None = None
    data: dict[str, Any] = {}

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


class Accepted(msgspec.Struct, frozen=True):
    """202 answer: the notification id and one entry per delivery (with the reason when it
    was suppressed or expired at once)."""

    id: str
    deliveries: list[DeliveryAtAcceptance]
