"""The provider contract every channel adapter implements.

``send`` returns the provider's message id or raises ``ProviderError`` with a class that
decides what the worker does: TRANSIENT is retried with backoff, PERMANENT fails the
delivery at once (its ``reason`` says why). Any other exception is a BUG: the worker survives
it and dead-letters the delivery.

An adapter that knows its message never reached the provider (the connection was refused,
the name did not resolve, the provider refused before taking the body) says so with
``not_accepted``: only then may the next attempt go to another provider of the channel
(failover) without the risk of a second copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Protocol

from streams.core.errors import ClarionError
from streams.core.vocabulary import Channel, ErrorClass, Priority

# The header an email carries its delivery id in, whichever provider sends it: a bounce or a
# second copy can be traced to its delivery by it.
DELIVERY_HEADER: Final = "X-Clarion-Delivery-Id"
# RFC 8058 one-click unsubscribe: the link, and what a mail client POSTs to it.
UNSUBSCRIBE_HEADER: Final = "List-Unsubscribe"
UNSUBSCRIBE_POST_HEADER: Final = "List-Unsubscribe-Post"
ONE_CLICK: Final = "List-Unsubscribe=One-Click"


@dataclass(frozen=True, slots=True)
class PushContent:
    """What a PUSH template made beyond the title and body; each push adapter builds its
    platform's payload from it (``app.catalog.templates``: the template's push parts)."""

    # Custom key-value pairs the app receives with the notification (FCM's ``data`` takes
    # strings only, so every value is one).
    data: dict[str, str] = field(default_factory=dict)
    # The app icon's badge count; None leaves it as it is.
    badge: int | None = None
    # A sound's name ("default": the platform's); "" plays none.
    sound: str = ""
    # Where tapping the notification leads (a deep link or an https URL); "" opens the app.
    link: str = ""
    # Notifications with the same key replace each other on the device (APNs collapse id,
    # FCM collapse key, Web Push Topic); "" for none.
    collapse_key: str = ""


@dataclass(frozen=True, slots=True)
class Message:
    """One rendered message for one address."""

    delivery_id: str
    # Stable across every attempt and replay, so a provider with an idempotent send API
    # sends once even when Clarion crashed between its accepting and our recording.
    idempotency_key: str
    channel: Channel
    address: str
    # EMAIL: the subject; PUSH and IN_APP: the title; SMS and WEBHOOK: empty.
    title: str
    # EMAIL: the plain-text body; WEBHOOK: the JSON body, as text.
    body: str
    attempt: int
    # The notification's template data (adapters such as the sandbox read directives here).
    data: dict[str, Any] = field(default_factory=dict)
    # EMAIL: the HTML body ("" for a text-only message).
    html: str = ""
    notification_id: str = ""
    notification_type: str = ""
    # SMS: the encoding the text needs (GSM-7 or UCS-2) and the segments it takes.
    sms_encoding: str = ""
    sms_segments: int = 0
    priority: Priority = Priority.NORMAL
    # When the notification's TTL ends (Unix ms; 0: unknown). A push provider is told the
    # time left at each attempt, never the original TTL.
    expires_ms: int = 0
    # PUSH: the template's push parts.
    push: PushContent = field(default_factory=PushContent)
    # EMAIL of a type recipients may switch off: the one-click unsubscribe link (RFC 8058),
    # which an email adapter puts in List-Unsubscribe beside List-Unsubscribe-Post; "" for
    # none (another type, or no CLARION_PUBLIC_URL).
    unsubscribe_url: str = ""

    @property
    def unsubscribe_headers(self) -> dict[str, str]:
        """The header fields of RFC 8058 one-click unsubscribe (none without a link)."""
        if not self.unsubscribe_url:
            return {}
        return {UNSUBSCRIBE_HEADER: f"<{self.unsubscribe_url}>", UNSUBSCRIBE_POST_HEADER: ONE_CLICK}


class Reason(StrEnum):
    """Why a delivery failed for good (the ``reason`` of a PERMANENT failure)."""

    # The address does not exist or is dead (bounced mailbox, invalid number or token):
    # the recipient's address is marked invalid and not used again.
    INVALID_ADDRESS = "invalid_address"
    # The recipient told the provider to stop (an SMS STOP, a list unsubscribe).
    UNSUBSCRIBED = "unsubscribed"
    # The provider refused this message (content, sender, account).
    REJECTED = "rejected"
    # The template could not be rendered for this delivery's data.
    TEMPLATE = "template"
    # The message is bigger than the channel or platform takes (a push payload over 4 KB).
    PAYLOAD_TOO_LARGE = "payload_too_large"


class ProviderError(ClarionError):
    """A provider refused or failed a send, classified."""

    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        retry_after: float | None = None,
        reason: Reason | None = None,
        not_accepted: bool = False,
    ) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        # Seconds the provider asked us to wait (HTTP 429 Retry-After).
        self.retry_after = retry_after
        self.reason = reason
        # The provider certainly did not take the message: another provider may send it.
        self.not_accepted = not_accepted

    @property
    def invalid_address(self) -> bool:
        """The address is dead (e.g. an invalid push token): stop using it for the recipient."""
        return self.reason is Reason.INVALID_ADDRESS


class Provider(Protocol):
    """A channel adapter."""

    name: str

    async def send(self, message: Message) -> str:
        """Send ``message``; return the provider's message id or raise ``ProviderError``."""
        ...

    async def close(self) -> None:
        """Close pooled connections (the worker is stopping)."""
        ...
