"""A provider's callback as it came over HTTP, and the first checks on it: until its signature
is verified, every header and every byte of it is whatever the caller chose to send.

A header that is missing, longer than its bound or not ASCII (ASGI gives header values as
Latin-1, so any byte can arrive) is refused with 401 naming the header, before it is compared,
decoded or parsed; what is compared is bytes. A body over its scheme's bound is refused with
413 (the API stops reading at the bound, see ``app.api.feedback``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

# The longest signature header taken: a few signatures side by side (key rotation).
MAX_SIGNATURE_CHARS: Final = 1024
# A signed time is Unix seconds: 12 digits reach the year 33658.
MAX_TIME_DIGITS: Final = 12


class Refused(Exception):
    """The callback is not taken: ``status`` and what is wrong with it."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Callback:
    """An HTTP request a provider made to ``/v1/feedback/<name>``."""

    url: str  # as the provider called it (the public URL), query included
    headers: Mapping[str, str]  # lower-case names, values as Latin-1
    body: bytes
    received_ms: int


def header(callback: Callback, name: str, max_chars: int = MAX_SIGNATURE_CHARS) -> bytes:
    """The value of header ``name`` as ASCII bytes; ``Refused`` (401, naming the header)
    when it is missing, longer than ``max_chars`` or not ASCII."""
    value = callback.headers.get(name.lower(), "")
    if not value:
        raise Refused(401, f"{name}: missing")
    if len(value) > max_chars:
        raise Refused(401, f"{name}: longer than {max_chars} characters")
    if not value.isascii():
        raise Refused(401, f"{name}: not ASCII")
    return value.encode("ascii")


def signed_time(callback: Callback, name: str) -> bytes:
    """The signed time in header ``name``: Unix seconds in ASCII digits (``str.isdigit``
    would take other scripts' digits and superscripts, which ``int`` may refuse), else 401."""
    value = header(callback, name, MAX_TIME_DIGITS)
    if not value.isdigit():
        raise Refused(401, f"{name}: a Unix time in seconds is required")
    return value


def within(callback: Callback, max_bytes: int) -> None:
    """``Refused`` (413) when the body is over its scheme's bound."""
    if len(callback.body) > max_bytes:
        raise too_large(max_bytes)


def too_large(max_bytes: int) -> Refused:
    """The refusal of a body over its provider's bound of ``max_bytes``."""
    return Refused(413, f"body: larger than {max_bytes} bytes, this provider's bound")
