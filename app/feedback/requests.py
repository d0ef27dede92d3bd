"""A provider's callback as it came over HTTP, and the first checks on it: until its signature
is verified, every header and every byte of it is whatever the caller chose to send.

A header that is missing, longer than its bound or not ASCII (ASGI gives header values as
Latin-1, so any byte can arrive) is refused as ``Unauthenticated`` naming the header, before
it is compared, decoded or parsed; what is compared is bytes. A body over its scheme's bound
is refused as ``TooLarge`` (the API stops reading at the bound, see ``app.feedback.api``).
Every refusal is one of ``Refusal``'s kinds (``streams.core.errors``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from streams.core.errors import Malformed, TooLarge, Unauthenticated

# The longest signature header taken: a few signatures side by side (key rotation).
MAX_SIGNATURE_CHARS: Final = 1024
# A signed time is Unix seconds: 12 digits reach the year 33658.
MAX_TIME_DIGITS: Final = 12


# Why a callback is not taken: unreadable or stale (``Malformed``), not proven to come from
# the provider (``Unauthenticated``), or over its bound (``TooLarge``).
Refusal = Malformed | Unauthenticated | TooLarge


@dataclass(frozen=True, slots=True)
class Callback:
    """An HTTP request a provider made to ``/v1/feedback/<name>``."""

    url: str  # as the provider called it (the public URL), query included
    headers: Mapping[str, str]  # lower-case names, values as Latin-1
    body: bytes
    received_ms: int


def header(callback: Callback, name: str, max_chars: int = MAX_SIGNATURE_CHARS) -> bytes:
    """The value of header ``name`` as ASCII bytes; ``Unauthenticated`` (naming the header)
    when it is missing, longer than ``max_chars`` or not ASCII."""
    value = callback.headers.get(name.lower(), "")
    if not value:
        raise Unauthenticated(f"{name}: missing")
    if len(value) > max_chars:
        raise Unauthenticated(f"{name}: longer than {max_chars} characters")
    if not value.isascii():
        raise Unauthenticated(f"{name}: not ASCII")
    return value.encode("ascii")


def signed_time(callback: Callback, name: str) -> bytes:
    """The signed time in header ``name``: Unix seconds in ASCII digits (``str.isdigit``
    would take other scripts' digits and superscripts, which ``int`` may refuse), else
    ``Unauthenticated``."""
    value = header(callback, name, MAX_TIME_DIGITS)
    if not value.isdigit():
        raise Unauthenticated(f"{name}: a Unix time in seconds is required")
    return value


def within(callback: Callback, max_bytes: int) -> None:
    """``TooLarge`` when the body is over its scheme's bound."""
    if len(callback.body) > max_bytes:
        raise too_large(max_bytes)


def too_large(max_bytes: int) -> TooLarge:
    """The refusal of a body over its provider's bound of ``max_bytes``."""
    return TooLarge(f"body: larger than {max_bytes} bytes, this provider's bound")
