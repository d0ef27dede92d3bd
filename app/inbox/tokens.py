"""Recipient tokens: what a recipient's app presents to read its own inbox (``/v1/inbox``).

A producer's backend (scope ``recipients``) asks for one for a recipient it has signed in
and hands it to the app; the token grants that recipient's inbox and nothing else, until it
expires (at most ``MAX_TTL_SECONDS``) or is revoked. It is signed, not encrypted.

Keys: ``CLARION_INBOX_TOKEN_KEYS`` (``k2:<secret>,k1:<older secret>``) names them by key
id; the first signs, every one verifies, and a token names the key that signed it, so keys
rotate (add a new one first, drop the old one once its tokens have expired: at most 12 h)
without touching unsubscribe links or the suppression list's digests. Without it one key
(id ``d``) is derived from ``CLARION_DIGEST_SECRET``. Either way each secret is used under a
purpose label of its own, so an unsubscribe token is never taken for a recipient token.

Revocation: each token carries its recipient's revocation epoch as it was when the token was
made (``streams.inbox.revocation``); revoking (``POST /v1/recipients/{id}/inbox-tokens/revoke``,
or erasing the recipient) raises the epoch, and a token of an older one is refused by the
inbox's own Redis reads (``streams.inbox.store``). This module only signs and reads it.

A token is ``<key id>.`` followed by the base64url form, without padding, of::

    version (1 byte, 2) | expiry (4 bytes, Unix seconds) | epoch (8 bytes)
    | recipient id (UTF-8, the rest) | HMAC-SHA256 of everything before, its first 16 bytes

(integers big-endian) in the envelope of ``app.signed_tokens``, which checks the MAC before
anything of the body is read. Tokens of version 1 (before key ids) are refused as malformed:
an app asks for a new token, as when one expires.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from app.signed_tokens import MAX_TOKEN_CHARS, Seal, SealBroken, TokenRefused

TOKEN_VERSION: Final = 2
PURPOSE: Final = b"clarion inbox token v1"
# The id of the key derived from CLARION_DIGEST_SECRET when no key is configured.
DERIVED_KEY_ID: Final = "d"
KEY_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,16}")
# The longest life a token may be given: a recipient's app asks its backend for a new one.
MAX_TTL_SECONDS: Final = 12 * 3600
# Tokens whose verdict a process remembers (the most recently used).
VERIFIED_NAMEDS: Final = 10_000

_HEAD = struct.Struct(">BIQ")  # version, expiry, epoch
_SHORTEST = _HEAD.size + 1  # a recipient id of one byte

# A token that grants nothing is refused as ``TokenRefused`` (``app.signed_tokens``: a
# revoked one is refused by the inbox's reads, ``streams.inbox.revocation``) and named so in
# its message.
_NAMED = "recipient token"


@dataclass(frozen=True, slots=True)
class Grant:
    """What a token grants: one recipient's inbox, until ``expires_at`` (Unix seconds) or
    until the recipient's revocation epoch moves past ``epoch``."""

    recipient_id: str
    expires_at: int
    epoch: int = 0


class InboxTokens:
    """Makes recipient tokens with the first of its keys and reads them with any: ``keys``
    (key id, secret), or without them one key derived from ``digest_secret``."""

    __slots__ = ("_seals", "_signing", "_verified")

    def __init__(self, digest_secret: bytes = b"", *, keys: Sequence[tuple[str, bytes]] = ()):
        keys = list(keys) or [(DERIVED_KEY_ID, digest_secret)]
        if not all(secret for _, secret in keys):
            raise ValueError("recipient tokens need a secret key")
        if not all(KEY_ID.fullmatch(key_id) for key_id, _ in keys):
            raise ValueError("a recipient token key id is 1-16 letters, digits, '_' or '-'")
        self._seals = {
            key_id: Seal(secret, PURPOSE, version=TOKEN_VERSION, shortest_body=_SHORTEST)
            for key_id, secret in keys
        }
        self._signing = keys[0][0]
        # An app sends its token with every request: what a token says is remembered, so
        # a repeated one costs a dictionary lookup, not a decode and an HMAC (its expiry is
        # still checked each time).
        self._verified = functools.lru_cache(maxsize=VERIFIED_NAMEDS)(self._verify)

    def __repr__(self) -> str:  # never print the key
        return "InboxTokens(<secret>)"

    def make(self, grant: Grant) -> str:
        head = _HEAD.pack(TOKEN_VERSION, grant.expires_at, grant.epoch)
        body = head + grant.recipient_id.encode("utf-8")
        return f"{self._signing}.{self._seals[self._signing].seal(body)}"

    def read(self, token: str, now_s: float) -> Grant:
        """What ``token`` grants; ``TokenRefused`` unless it is whole, signed with this key
        and not expired at ``now_s``."""
        grant = self._verified(token)
        if isinstance(grant, TokenRefused):
            raise TokenRefused(grant.why, _NAMED)
        if now_s >= grant.expires_at:
            raise TokenRefused("expired", _NAMED)
        return grant

    def _verify(self, token: str) -> Grant | TokenRefused:
        """What a token says, or why it says nothing (a refusal is returned, not raised, so
        it is remembered too)."""
        try:
            return self._decode(token)
        except TokenRefused as refused:
            return refused

    def _decode(self, token: str) -> Grant:
        if len(token) > MAX_TOKEN_CHARS:
            raise TokenRefused("malformed", _NAMED)
        key_id, dot, sealed = token.partition(".")
        if not dot or not KEY_ID.fullmatch(key_id):
            raise TokenRefused("malformed", _NAMED)
        seal = self._seals.get(key_id)
        if seal is None:
            raise TokenRefused("forged", _NAMED)  # not a key of ours (any more)
        try:
            body = seal.open(sealed)
        except SealBroken as broken:
            raise TokenRefused(broken.why, _NAMED) from None
        _, expires_at, epoch = _HEAD.unpack_from(body)
        try:
            recipient_id = body[_HEAD.size :].decode("utf-8")
        except UnicodeDecodeError:
            raise TokenRefused("malformed", _NAMED) from None
        return Grant(recipient_id, expires_at, epoch)
