"""What a Web Push message is made of, before it travels (``app.providers.webpush`` sends it):
the browser's subscription, the plaintext, its encryption for the browser (RFC 8291) and the
application server's signature (VAPID, RFC 8292), the TTL and Topic headers' values.

A delivery's address is the browser's subscription (``app.catalog.push.parse_address``): the
endpoint URL, ``p256dh`` (the browser's P-256 public key, 65 bytes uncompressed) and ``auth``
(a 16-byte secret), both base64url. Keys of other sizes, or a p256dh that is not a point of
the curve, are refused (``subscription``): the browser would never decrypt a message made
with them.

The body is the aes128gcm content coding of RFC 8188, one record (``rs`` 4096): a 86-byte
header (salt, record size, key id = the sender's public key) and the ciphertext, made with a
fresh ephemeral P-256 key and a random 16-byte salt per message, as RFC 8291 requires. Push
services take at most 4096 bytes of it, so a plaintext over 3993 bytes (4096 - 86 header -
16 tag - 1 delimiter) cannot be sent (``MAX_PLAINTEXT_BYTES``). ``encrypt`` writes RFC 8291
section 3.4 out on ``cryptography``'s primitives (the ECDH, three HKDFs, one AES-GCM record);
it reproduces the RFC's Appendix A example byte for byte, and ``http_ece``'s decryption reads
what it makes (both tested). ``http_ece`` itself is not used to send: its Python around the
same primitives cost 55 to 60 µs a message more (236 against 178 µs in all on this project's
two-core machine, of which the ephemeral key is about 32 µs and the ECDH about 72 µs).
Decoding the subscription's key and building the JSON add about 20 µs. It runs on the event
loop: a thread hop would cost about as much as it saves.

``Vapid`` makes ``Authorization: vapid t=<JWT>, k=<public key>``: an ES256 JWT ``{"aud": the
endpoint's origin, "exp", "sub": subject}``. A JWT is valid 12 hours and kept per audience
(origin), reused until an hour before it expires: one signature per push service per 11
hours, not one per message. At most ``MAX_AUDIENCES`` are kept (endpoints name any host; the
oldest is dropped).

The plaintext (``payload``) is Declarative Web Push's JSON (the Push API's "declarative push
message", WebKit's ``"web_push": 8030``), which a browser shows without a service worker and
a service worker can still read as plain JSON: ``{"web_push": 8030, "notification": {"title",
"body", "navigate": link, "tag"?: collapse key, "data"?: data}, "app_badge"?: badge}``.
Declarative messages require ``navigate``, an absolute URL: without a link, or with one that
is not an http(s) URL (a path, an app's own scheme), the magic ``web_push`` member is left out
and the same JSON goes to the site's service worker, which opens what it wants. ``tag``
carries the collapse key so a shown notification is replaced too (the Topic replaces only one
still waiting at the push service). A sound is not a Web Push concept (the browser decides):
it is dropped. A negative badge is dropped too (``app_badge`` is an unsigned integer).

``TTL`` is the seconds left of the notification's TTL at this attempt (``ttl_seconds``); the
``Topic`` of a collapse key RFC 8030 does not allow (at most 32 characters of the URL-safe
base64 alphabet) is the first 32 characters of its SHA-256 in base64url (``topic``: the same
key always makes the same topic).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import jwt
import msgspec
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from app.catalog.push import Platform, b64url_decode, parse_address
from app.providers.base import Message

# What push services must take (RFC 8030 section 7.2), and the plaintext that fits into it
# as one aes128gcm record: the header (salt 16, rs 4, idlen 1, key id 65) and the tag and
# padding delimiter of the record come off.
MAX_BODY_BYTES: Final = 4096
HEADER_BYTES: Final = 16 + 4 + 1 + 65
MAX_PLAINTEXT_BYTES: Final = MAX_BODY_BYTES - HEADER_BYTES - 16 - 1
RECORD_SIZE: Final = 4096
# A JWT's lifetime and how long before its end a new one is made: push services refuse an
# exp more than 24 h ahead, and a clock a little off either way must not matter.
JWT_LIFETIME_SECONDS: Final = 12 * 3600
JWT_RENEW_SECONDS: Final = 3600
MAX_AUDIENCES: Final = 256
# The TTL of a message whose notification has none (tests; every delivery has one): four
# weeks, the longest the big push services keep a message.
DEFAULT_TTL_SECONDS: Final = 28 * 24 * 3600
P256_POINT_BYTES: Final = 65
AUTH_SECRET_BYTES: Final = 16

_TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")
_ABSOLUTE_LINK = re.compile(r"https?://[^\s/?#]+", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Subscription:
    """A browser's push subscription, its keys decoded."""

    endpoint: str
    public_key: ec.EllipticCurvePublicKey
    point: bytes  # the public key, encoded (p256dh)
    auth: bytes


def subscription(address: str) -> Subscription:
    """The subscription of a PUSH address; ``ValueError`` (quoting none of it) if the address
    holds none that a browser could decrypt a message for."""
    target = parse_address(address)
    if target.platform is not Platform.WEBPUSH or not target.token:
        raise ValueError("the address is not a Web Push subscription")
    try:
        point = b64url_decode(target.p256dh)
        auth = b64url_decode(target.auth)
    except ValueError:
        raise ValueError("the subscription's keys are not base64url") from None
    if len(point) != P256_POINT_BYTES or len(auth) != AUTH_SECRET_BYTES:
        raise ValueError("the subscription's keys are not a 65-byte p256dh and a 16-byte auth")
    try:
        public_key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    except ValueError:
        raise ValueError("the subscription's p256dh is not a P-256 public key") from None
    return Subscription(target.token, public_key, point, auth)


def payload(message: Message) -> bytes:
    """The push message's plaintext: Declarative Web Push JSON (see the module's text)."""
    push = message.push
    notification: dict[str, object] = {"title": message.title, "body": message.body}
    if push.link:
        notification["navigate"] = push.link
    if push.collapse_key:
        notification["tag"] = push.collapse_key
    if push.data:
        notification["data"] = push.data
    content: dict[str, object] = {"web_push": 8030} if _ABSOLUTE_LINK.match(push.link) else {}
    content["notification"] = notification
    if push.badge is not None and push.badge >= 0:
        content["app_badge"] = push.badge
    return msgspec.json.encode(content)


def encrypt(
    plaintext: bytes,
    public_key: ec.EllipticCurvePublicKey,
    auth: bytes,
    *,
    sender: ec.EllipticCurvePrivateKey | None = None,
    salt: bytes | None = None,
    point: bytes = b"",
) -> bytes:
    """``plaintext`` as an aes128gcm body for the browser holding ``public_key`` (RFC 8291
    section 3.4, one record; ``point``: that key encoded, when the caller has it); a fresh
    sender key and salt unless given (only tests give them: RFC 8291's example)."""
    sender = sender or ec.generate_private_key(ec.SECP256R1())
    salt = salt or os.urandom(16)
    sender_key = _raw(sender.public_key())
    shared = sender.exchange(ec.ECDH(), public_key)
    key_info = b"WebPush: info\x00" + (point or _raw(public_key)) + sender_key
    ikm = _hkdf(auth, shared, key_info, 32)
    content_key = _hkdf(salt, ikm, b"Content-Encoding: aes128gcm\x00", 16)
    nonce = _hkdf(salt, ikm, b"Content-Encoding: nonce\x00", 12)
    # One record, the last: the plaintext, the delimiter 2, no padding.
    record = AESGCM(content_key).encrypt(nonce, plaintext + b"\x02", None)
    header = salt + RECORD_SIZE.to_bytes(4, "big") + bytes([len(sender_key)]) + sender_key
    return header + record


def _raw(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)


def _hkdf(salt: bytes, secret: bytes, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(secret)


def topic(collapse_key: str) -> str:
    """The ``Topic`` for a collapse key: itself when RFC 8030 allows it, else its hash."""
    if _TOPIC.fullmatch(collapse_key):
        return collapse_key
    digest = hashlib.sha256(collapse_key.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()[:32]


def ttl_seconds(expires_ms: int, now: float) -> int:
    """Whole seconds left until ``expires_ms`` at ``now`` (Unix seconds), at least 0."""
    if expires_ms <= 0:
        return DEFAULT_TTL_SECONDS
    return max(0, (expires_ms - int(now * 1000)) // 1000)


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Vapid:
    """The ``Authorization`` values of one VAPID key, a JWT kept per audience."""

    def __init__(
        self, key: ec.EllipticCurvePrivateKey, subject: str, clock: Callable[[], float]
    ) -> None:
        self._key = key
        self._subject = subject
        self._clock = clock
        self.public_key = _b64url(_raw(key.public_key()))
        # audience -> (Authorization value, the JWT's exp)
        self._tokens: dict[str, tuple[str, int]] = {}

    def authorization(self, audience: str) -> str:
        """``vapid t=<JWT>, k=<key>`` for ``audience`` (an origin), signed anew only when the
        kept JWT is within ``JWT_RENEW_SECONDS`` of its end."""
        now = self._clock()
        kept = self._tokens.get(audience)
        if kept is not None and kept[1] - now > JWT_RENEW_SECONDS:
            return kept[0]
        expires = int(now) + JWT_LIFETIME_SECONDS
        claims = {"aud": audience, "exp": expires, "sub": self._subject}
        token = jwt.encode(claims, self._key, algorithm="ES256", headers={"typ": "JWT"})
        value = f"vapid t={token}, k={self.public_key}"
        if kept is None and len(self._tokens) >= MAX_AUDIENCES:
            del self._tokens[next(iter(self._tokens))]
        self._tokens[audience] = (value, expires)
        return value
