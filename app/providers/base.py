"""The provider contract every channel adapter implements.

``send`` returns the provider's message id or raises ``ProviderError`` with a class that
decides what the worker does: TRANSIENT is retried with backoff, PERMANENT fails the
delivery at once. Any other exception is a BUG: the worker survives it and dead-letters the
delivery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from streams.vocabulary import Channel, ErrorClass


@dataclass(frozen=True, slots=True)
class Message:
    """One rendered message for one address."""

    delivery_id: str
    # Stable across every attempt and replay, so a provider with an idempotent send API
    # sends once even when Clarion crashed between its accepting and our recording.
    idempotency_key: str
    channel: Channel
    address: str
    title: str
    body: str
    attempt: int
    # The notification's template data (adapters such as the sandbox read directives here).
    data: dict[str, Any] = field(default_factory=dict)


class ProviderError(Exception):
    """A provider refused or failed a send, classified."""

    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        retry_after: float | None = None,
        invalid_address: bool = False,
    ) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        # Seconds the provider asked us to wait (HTTP 429 Retry-After).
        self.retry_after = retry_after
        # The address is dead (e.g. an invalid push token): stop using it for the recipient.
        self.invalid_address = invalid_address


class Provider(Protocol):
    """A channel adapter."""

    name: str

    async def send(self, message: Message) -> str:
        """Send ``message``; return the provider's message id or raise ``ProviderError``."""
        ...
