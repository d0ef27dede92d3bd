"""Recipient tokens: what a recipient's app presents to read its own inbox (``/v1/inbox``).

A producer's backend (scope ``recipients``) asks for one for a recipient it has signed in
and hands it to the app; the token grants that recipient's inbox and nothing else, until it
expires (at most ``MAX_TTL_SECONDS``). Like an unsubscribe token (``app.unsubscribe``) it is
signed, not encrypted, with a key derived from ``CLARION_DIGEST_SECRET`` under a purpose
label of its own, so neither kind of token is ever taken for the other.

A token is the base64url form, without padding, of::

    version (1 byte) | expiry (4 bytes, Unix seconds, big-endian)
    | recipient id (UTF-8, the rest) | HMAC-SHA256 of everything before, its first 16 bytes

in the envelope of ``app.signed_tokens``, which checks the MAC before anything of the body
is read.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Final, Literal

from app.signed_tokens import Seal, SealBroken

TOKEN_VERSION: Final = 1
PURPOSE: Final = b"clarion inbox token v1"
# The longest life a token may be given: a recipient's app asks its backend for a new one.
MAX_TTL_SECONDS: Final = 12 * 3600
# Tokens whose verdict a process remembers (the most recently used).
VERIFIED_TOKENS: Final = 10_000

_HEAD = struct.Struct(">BI")  # version, expiry
_SHORTEST = _HEAD.size + 1  # a recipient id of one byte

Why = Literal["malformed", "forged", "expired"]


class TokenRefused(Exception):
    """A token that grants nothing: malformed, forged (changed, or signed with another key)
    or expired. The message never holds the token."""

    def __init__(self, why: Why) -> None:
        super().__init__(f"recipient token {why}")
        self.why: Why = why


@dataclass(frozen=True, slots=True)
class Grant:
    """What a token grants: one recipient's inbox, until ``expires_at`` (Unix seconds)."""

    recipient_id: str
    expires_at: int


class InboxTokens:
    """Makes and reads recipient tokens with a key derived from a deployment's secret."""

    __slots__ = ("_seal", "_verified")

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise ValueError("recipient tokens need a secret key")
        self._seal = Seal(secret, PURPOSE, version=TOKEN_VERSION, shortest_body=_SHORTEST)
        # An app sends its token with every request: what a token says is remembered, so
        # a repeated one costs a dictionary lookup, not a decode and an HMAC (its expiry is
        # still checked each time).
        self._verified = functools.lru_cache(maxsize=VERIFIED_TOKENS)(self._verify)

    def __repr__(self) -> str:  # never print the key
        return "InboxTokens(<secret>)"

    def make(self, grant: Grant) -> str:
        body = _HEAD.pack(TOKEN_VERSION, grant.expires_at) + grant.recipient_id.encode("utf-8")
        return self._seal.seal(body)

    def read(self, token: str, now_s: float) -> Grant:
        """What ``token`` grants; ``TokenRefused`` unless it is whole, signed with this key
        and not expired at ``now_s``."""
        grant = self._verified(token)
        if isinstance(grant, TokenRefused):
            raise TokenRefused(grant.why)
        if now_s >= grant.expires_at:
            raise TokenRefused("expired")
        return grant

    def _verify(self, token: str) -> Grant | TokenRefused:
        """What a token says, or why it says nothing (a refusal is returned, not raised, so
        it is remembered too)."""
        try:
            return self._decode(token)
        except TokenRefused as refused:
            return refused

    def _decode(self, token: str) -> Grant:
        try:
            body = self._seal.open(token)
        except SealBroken as broken:
            raise TokenRefused(broken.why) from None
        _, expires_at = _HEAD.unpack_from(body)
        try:
            recipient_id = body[_HEAD.size :].decode("utf-8")
        except UnicodeDecodeError:
            raise TokenRefused("malformed") from None
        return Grant(recipient_id, expires_at)
