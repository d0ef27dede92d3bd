"""One-click unsubscribe links (RFC 8058): the signed token a link carries, and the link.

A link is ``<CLARION_PUBLIC_URL>/v1/unsubscribe/<token>``. The token says what a POST to the
link switches off (the recipient id, the notification type, the channel) and until when it
may (its expiry). It is signed, not encrypted: whoever holds the link can read these (the
recipient's own id and the type of the email it came in), and nobody without the key can
make or change one. The key is derived from ``CLARION_DIGEST_SECRET`` with a purpose label,
so no new secret is needed and no other use of that secret (the address digests) ever
computes a token's signature.

A token is the base64url form, without padding, of::

    version (1 byte) | expiry (4 bytes, Unix seconds, big-endian)
    | channel length (1 byte) | channel | type length (1 byte) | type
    | recipient id (UTF-8, the rest) | HMAC-SHA256 of everything before, its first 16 bytes

An order email's token has 67 characters. The envelope (base64url, the MAC, the checks
made before anything of the body is read) is ``app.signed_tokens``'.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from app.setting_values import SettingsError
from app.settings import Settings
from app.signed_tokens import Seal, SealBroken, TokenRefused
from streams.core.vocabulary import Channel

TOKEN_VERSION: Final = 1
# The purpose label the signing key is derived with: a token signed for another purpose,
# or with the secret itself, is refused.
PURPOSE: Final = b"clarion unsubscribe link v1"
PATH: Final = "/v1/unsubscribe/"
# A link must fit on the List-Unsubscribe header's line (998 characters, RFC 5322) with its
# name and brackets; a longer one (a recipient id of hundreds of non-ASCII characters) is
# not added to the email.
MAX_URL_CHARS: Final = 900

_HEAD = struct.Struct(">BI")  # version, expiry
# Version, expiry, two lengths, a channel, a type, a recipient id of one byte.
_SHORTEST = _HEAD.size + 2 + 3

# A token that unsubscribes no one is refused as ``TokenRefused`` (``app.signed_tokens``)
# and named so in its message.
_NAMED = "unsubscribe token"


@dataclass(frozen=True, slots=True)
class OptOut:
    """What a token switches off, and until when it may."""

    recipient_id: str
    notification_type: str
    channel: Channel
    expires_at: int  # Unix seconds


class UnsubscribeTokens:
    """Makes and reads unsubscribe tokens with a key derived from a deployment's secret."""

    __slots__ = ("_seal",)

    def __init__(self, secret: bytes, purpose: bytes = PURPOSE) -> None:
        if not secret:
            raise ValueError("unsubscribe tokens need a secret key")
        self._seal = Seal(secret, purpose, version=TOKEN_VERSION, shortest_body=_SHORTEST)

    def __repr__(self) -> str:  # never print the key
        return "UnsubscribeTokens(<secret>)"

    def make(self, opt_out: OptOut) -> str:
        """The token of ``opt_out``."""
        channel = opt_out.channel.value.encode("ascii")
        type_name = opt_out.notification_type.encode("ascii")
        body = b"".join(
            (
                _HEAD.pack(TOKEN_VERSION, opt_out.expires_at),
                bytes((len(channel),)),
                channel,
                bytes((len(type_name),)),
                type_name,
                opt_out.recipient_id.encode("utf-8"),
            )
        )
        return self._seal.seal(body)

    def read(self, token: str, now_s: float) -> OptOut:
        """What ``token`` switches off; ``TokenRefused`` unless it is whole, signed with this
        key and not expired at ``now_s``."""
        try:
            body = self._seal.open(token)
        except SealBroken as broken:
            raise TokenRefused(broken.why, _NAMED) from None
        opt_out = _parse(body)
        if now_s >= opt_out.expires_at:
            raise TokenRefused("expired", _NAMED)
        return opt_out


def _parse(body: bytes) -> OptOut:
    """The fields of a signed token's body (signed by us, so well-formed unless the key
    leaked or a bug wrote it: either way a refusal, never an exception)."""
    try:
        _, expires_at = _HEAD.unpack_from(body)
        at = _HEAD.size
        channel = body[at + 1 : at + 1 + body[at]].decode("ascii")
        at += 1 + body[at]
        type_name = body[at + 1 : at + 1 + body[at]].decode("ascii")
        at += 1 + body[at]
        recipient_id = body[at:].decode("utf-8")
        return OptOut(recipient_id, type_name, Channel(channel), expires_at)
    except (IndexError, UnicodeDecodeError, ValueError, struct.error):
        raise TokenRefused("malformed", _NAMED) from None


@dataclass(frozen=True, slots=True)
class UnsubscribeLinks:
    """Makes the unsubscribe link of one email."""

    base_url: str  # CLARION_PUBLIC_URL, without a trailing "/"
    tokens: UnsubscribeTokens
    ttl_seconds: int

    def url(self, recipient_id: str, notification_type: str, channel: Channel, now_s: float) -> str:
        """The link for this recipient, type and channel, valid for ``ttl_seconds`` from
        ``now_s``; "" when it would be too long for the header (``MAX_URL_CHARS``)."""
        expires_at = int(now_s) + self.ttl_seconds
        token = self.tokens.make(OptOut(recipient_id, notification_type, channel, expires_at))
        url = f"{self.base_url}{PATH}{token}"
        return url if len(url) <= MAX_URL_CHARS else ""


def unsubscribe_links(settings: Settings) -> UnsubscribeLinks | None:
    """The links ``settings`` make, or None without ``CLARION_PUBLIC_URL``."""
    if not settings.public_url:
        return None
    if not settings.digest_secret:
        raise SettingsError(
            "CLARION_PUBLIC_URL needs CLARION_DIGEST_SECRET: unsubscribe links are signed "
            "with a key derived from it"
        )
    tokens = UnsubscribeTokens(settings.digest_secret)
    return UnsubscribeLinks(settings.public_url, tokens, settings.unsubscribe_ttl_seconds)
