"""Signed tokens' envelope, shared by unsubscribe links (``app.unsubscribe``) and recipient
tokens (``app.inbox.tokens``): a body sealed with a MAC, as URL-safe text.

A token is the base64url form, without padding, of the body (which starts with its format's
version byte) followed by the first 16 bytes of its HMAC-SHA256. The key is derived from a
deployment's secret under a purpose label, so a token sealed for one purpose never opens
for another. ``open`` reads nothing of a body before its MAC was checked, in constant time;
what the body says is each format's own business.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from typing import Final, Literal

from streams.core.errors import ClarionError, Unauthenticated

MAC_BYTES: Final = 16  # 128 bits of HMAC-SHA256
# Room for a recipient id of 255 characters of any script; anything longer is no token.
MAX_TOKEN_CHARS: Final = 1500

_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")

Broken = Literal["malformed", "forged"]
Why = Literal["malformed", "forged", "expired"]


class SealBroken(ClarionError):
    """A token that does not open: ``why`` is malformed (not a token of this format, cut
    short) or forged (its MAC does not match: changed, or sealed with another key). The
    message never holds the token."""

    def __init__(self, why: Broken) -> None:
        super().__init__(f"token {why}")
        self.why: Broken = why


class TokenRefused(Unauthenticated):
    """A token that grants nothing: ``why`` is malformed (not a token, cut short), forged
    (its MAC does not match: changed, or signed with a key this deployment does not hold)
    or expired. ``named`` is what the message calls the token, whose own text it never
    holds."""

    def __init__(self, why: Why, named: str = "token") -> None:
        super().__init__(f"{named} {why}")
        self.why: Why = why


def purpose_key(secret: bytes, purpose: bytes) -> bytes:
    """The key of one use of ``secret``: HMAC-SHA256 of the purpose label, keyed with it."""
    return hmac.digest(secret, purpose, "sha256")


class Seal:
    """Seals and opens the tokens of one purpose and format version."""

    __slots__ = ("_key", "_shortest", "_version")

    def __init__(self, secret: bytes, purpose: bytes, *, version: int, shortest_body: int):
        self._key = purpose_key(secret, purpose)
        self._version = version
        self._shortest = shortest_body + MAC_BYTES

    def __repr__(self) -> str:  # never print the key
        return "Seal(<secret>)"

    def seal(self, body: bytes) -> str:
        """The token of ``body`` (which starts with the version byte)."""
        return _text(body + self._mac(body))

    def open(self, token: str) -> bytes:
        """The body ``token`` seals; ``SealBroken`` unless it is whole, of this version and
        sealed with this key."""
        if not 0 < len(token) <= MAX_TOKEN_CHARS or not _BASE64URL.fullmatch(token):
            raise SealBroken("malformed")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise SealBroken("malformed") from None
        # One spelling per token: base64 lets the last character's unused bits vary.
        if len(raw) < self._shortest or raw[0] != self._version or _text(raw) != token:
            raise SealBroken("malformed")
        body, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(body)):
            raise SealBroken("forged")
        return body

    def _mac(self, body: bytes) -> bytes:
        return hmac.digest(self._key, body, "sha256")[:MAC_BYTES]


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
