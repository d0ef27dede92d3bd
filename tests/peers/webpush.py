"""A local push service (RFC 8030) that checks what a real one checks and, unlike one, also
plays the browser: it decrypts every message it takes. It speaks HTTP/2 over TLS, as the big
push services do (``tests.peers.http2_serving``: ALPN ``h2``, a certificate clients trust
through ``peer.ca.cert_pem``, every frame read by ``h2``; ``hosts`` names what the certificate
is for).

``POST /push/<n>`` delivers to subscription ``n``. Every request is checked, in this order:

- a subscription it knows (404), not one it was told is gone (``peer.gone(s, 410)``);
- a body of at most ``max_push_bytes`` (4096, as RFC 8030 requires push services to take;
  413 beyond);
- VAPID (RFC 8292): ``Authorization: vapid t=<JWT>, k=<key>``; the JWT's header is
  ``{"typ": "JWT", "alg": "ES256"}``, its ES256 signature verifies against ``k`` (verified
  once per distinct value, as an application server reuses a JWT for hours), ``aud`` is
  this service's ``origin``, ``exp`` is in the future and at most 24 hours ahead, ``sub`` is a
  mailto: or https: URL (401 otherwise). With ``application_server_key`` set, subscriptions
  are restricted to that key, and a valid token made with another key is answered 403;
- ``TTL`` an integer >= 0, ``Urgency`` (if given) very-low, low, normal or high, ``Topic`` (if
  given) at most 32 characters of the URL-safe base64 alphabet, ``Content-Encoding:
  aes128gcm`` (400 otherwise);
- the body decrypts with the subscription's private key (400 otherwise). The decryption is
  this module's own reading of RFC 8291 and RFC 8188 with ``cryptography``'s primitives, not
  ``http_ece`` nor the adapter's: a bug two of them shared would pass unseen. Its test is
  RFC 8291's Appendix A example (tests/unit/providers/test_webpush_message.py).

A message taken is kept in ``accepted`` (its plaintext, header fields with ``:authority``,
and JWT) and answered 201 with a ``Location`` (the push message resource). Scripted faults
(``fail(Fault.X, times=...)``): 429, 500 and 503 in autopush's shape, each with
``Retry-After`` when given, a request held until ``released`` (HANG) or a dropped connection
(DROP).

Subscriptions are numbers: subscription ``n``'s endpoint is ``{origin}/push/{n}`` and its
keys are derived from ``n`` and ``SEED`` (``subscription(n, origin)``), so a benchmark in
another process makes the same subscriptions the peer decrypts for. ``peer.subscribe()``
hands out the next number; a peer made with ``any_number=True`` (the standalone one) takes
every number. ``tests.peers.webpush_standalone`` serves the same checks on another HTTP/2
implementation, in a process of its own, for benchmarks. ``GET /_peer/stats`` answers
``{"accepted", "requests", "connections", "decrypted"}``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import secrets
import struct
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from app.catalog.push import subscription_address
from tests.peers import http2_serving
from tests.peers.http2_serving import Fields, Http2Peer, Reply, json_reply

SEED: Final = b"clarion-webpush-peer-v1"
MAX_BODY_BYTES: Final = 4096
MAX_EXP_AHEAD_SECONDS: Final = 24 * 3600
MAX_KEPT_TOKENS: Final = 10_000
URGENCIES: Final = frozenset({"very-low", "low", "normal", "high"})
# The order of P-256's group: a derived private key must lie in [1, order - 1].
P256_ORDER: Final = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")
_PATH = re.compile(r"/push/([0-9]{1,12})")


class Fault(StrEnum):
    RATE_LIMITED = "429"
    ERROR = "500"
    UNAVAILABLE = "503"
    HANG = http2_serving.HANG
    DROP = http2_serving.DROP


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def raw_public(key: ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) -> bytes:
    public = key.public_key() if isinstance(key, ec.EllipticCurvePrivateKey) else key
    return public.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)


def derived_keys(number: int) -> tuple[ec.EllipticCurvePrivateKey, bytes]:
    """Subscription ``number``'s browser key pair and auth secret, from ``SEED``."""
    tag = number.to_bytes(8, "big")
    scalar = int.from_bytes(hashlib.sha256(SEED + b"key" + tag).digest(), "big")
    key = ec.derive_private_key(scalar % (P256_ORDER - 1) + 1, ec.SECP256R1())
    return key, hashlib.sha256(SEED + b"auth" + tag).digest()[:16]


_Browser = tuple[ec.EllipticCurvePrivateKey, bytes, bytes]


def _browser(number: int) -> _Browser:
    key, auth = derived_keys(number)
    return key, auth, raw_public(key)


@dataclass(frozen=True)
class Subscription:
    """What a browser's ``PushSubscription.toJSON()`` gives the application server."""

    number: int
    endpoint: str
    p256dh: str
    auth: str

    @property
    def address(self) -> str:
        """The delivery address Clarion keeps for it."""
        return subscription_address(self.endpoint, self.p256dh, self.auth)


def subscription(number: int, origin: str) -> Subscription:
    """Subscription ``number`` of the push service at ``origin``."""
    key, auth = derived_keys(number)
    return Subscription(number, f"{origin}/push/{number}", b64url(raw_public(key)), b64url(auth))


class Undecryptable(ValueError):
    """The body is not an aes128gcm message for this subscription."""


def _hkdf(salt: bytes, ikm: bytes, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


def decrypt(
    body: bytes, ua_private: ec.EllipticCurvePrivateKey, auth: bytes, ua_public: bytes = b""
) -> bytes:
    """The plaintext of an aes128gcm (RFC 8188) body encrypted for this browser (RFC 8291);
    ``ua_public``: the browser's public key, when the caller has it encoded already."""
    if len(body) < 21:
        raise Undecryptable("shorter than the aes128gcm header")
    salt, (rs,), idlen = body[:16], struct.unpack("!I", body[16:20]), body[20]
    sender, records = body[21 : 21 + idlen], body[21 + idlen :]
    if idlen != 65 or rs < 18 or not records:
        raise Undecryptable("the header's key id is not a P-256 key, or no record follows")
    try:
        as_public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), sender)
    except ValueError:
        raise Undecryptable("the key id is not a point of P-256") from None
    ecdh_secret = ua_private.exchange(ec.ECDH(), as_public)
    key_info = b"WebPush: info\x00" + (ua_public or raw_public(ua_private)) + sender
    ikm = _hkdf(auth, ecdh_secret, key_info, 32)
    cek = _hkdf(salt, ikm, b"Content-Encoding: aes128gcm\x00", 16)
    nonce = _hkdf(salt, ikm, b"Content-Encoding: nonce\x00", 12)
    chunks = [records[start : start + rs] for start in range(0, len(records), rs)]
    plaintext = b""
    for counter, chunk in enumerate(chunks):
        iv = (int.from_bytes(nonce, "big") ^ counter).to_bytes(12, "big")
        try:
            padded = AESGCM(cek).decrypt(iv, chunk, None)
        except InvalidTag:
            raise Undecryptable(f"record {counter} does not authenticate") from None
        content = padded.rstrip(b"\x00")
        last = counter == len(chunks) - 1
        if not content or content[-1] != (2 if last else 1):
            raise Undecryptable(f"record {counter} has no padding delimiter")
        plaintext += content[:-1]
    return plaintext


class Unauthorized(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


@dataclass(frozen=True)
class Vapid:
    """A VAPID Authorization value whose signature verified: the JWT, its claims, ``k``."""

    token: str
    claims: dict[str, Any]
    key: bytes


def signed_vapid(authorization: str) -> Vapid:
    """The JWT, claims and key of an Authorization value whose ES256 signature verifies with
    its own ``k``, else ``Unauthorized``. The claims are not checked here."""
    scheme, _, rest = authorization.partition(" ")
    params = dict(part.strip().partition("=")[::2] for part in rest.split(","))
    token, k = params.get("t", ""), params.get("k", "")
    if scheme.lower() != "vapid" or not token or not k:
        raise Unauthorized(401, "no vapid t= and k=")
    try:
        key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(k))
        head, body, signature = token.split(".")
        header = json.loads(unb64url(head))
        claims = json.loads(unb64url(body))
        raw = unb64url(signature)
    except (ValueError, binascii.Error):
        raise Unauthorized(401, "the key or the JWT does not parse") from None
    if header != {"typ": "JWT", "alg": "ES256"} or len(raw) != 64:
        raise Unauthorized(401, f"not an ES256 JWT header: {header}")
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        key.verify(der, f"{head}.{body}".encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise Unauthorized(401, "the JWT's signature does not verify with k") from None
    if not isinstance(claims, dict):
        raise Unauthorized(401, "the JWT's claims are not an object")
    return Vapid(token, claims, unb64url(k))


def check_claims(vapid: Vapid, origin: str, now: float) -> None:
    """``Unauthorized`` unless the claims are for ``origin``, unexpired and signed by who."""
    claims = vapid.claims
    if claims.get("aud") != origin:
        raise Unauthorized(401, "aud is not this push service's origin")
    exp = claims.get("exp")
    if not isinstance(exp, int) or not now < exp <= now + MAX_EXP_AHEAD_SECONDS:
        raise Unauthorized(401, "exp is not in the next 24 hours")
    if not str(claims.get("sub", "")).startswith(("mailto:", "https:")):
        raise Unauthorized(401, "sub is not a mailto: or https: URL")


def verify_vapid(authorization: str, origin: str, now: float) -> tuple[str, bytes]:
    """The JWT and the key of a valid VAPID Authorization value, else ``Unauthorized``."""
    vapid = signed_vapid(authorization)
    check_claims(vapid, origin, now)
    return vapid.token, vapid.key


@dataclass(frozen=True)
class Push:
    """One push message taken."""

    number: int
    plaintext: bytes
    headers: dict[str, str]
    token: str
    location: str


class WebPushPeer(Http2Peer):
    """The push service; ``accepted`` holds a ``Push`` per message taken."""

    def __init__(self, origin: str = "", *, any_number: bool = False, **options: Any) -> None:
        super().__init__(**options)
        # https://host:port as the adapter's endpoints name it (set once served).
        self.origin = origin
        self.any_number = any_number
        # Bodies over this are answered 413 (a test lowers it to see a push service's 413).
        self.max_push_bytes = MAX_BODY_BYTES
        self.application_server_key: bytes | None = None
        self.decrypted = 0
        # Why each refused request was refused, in order (status, reason).
        self.refusals: list[tuple[int, str]] = []
        # subscription number -> the browser's private key, auth secret and public key
        self._keys: dict[int, _Browser] = {}
        self._gone: dict[int, int] = {}
        self._vapid: dict[str, Vapid] = {}
        self._next = 1

    def subscribe(self) -> Subscription:
        """A new subscription of this service (its private key stays here)."""
        number, self._next = self._next, self._next + 1
        self._keys[number] = _browser(number)
        return subscription(number, self.origin)

    def gone(self, sub: Subscription, status: int = 410) -> None:
        """Answer ``status`` (404 or 410) for ``sub`` from now on: the browser dropped it."""
        self._gone[sub.number] = status

    def stats(self) -> dict[str, int]:
        return {**super().stats(), "decrypted": self.decrypted}

    def _refuse(self, status: int, why: str, errno: int) -> Reply:
        self.refusals.append((status, why))
        return json_reply(status, {"code": status, "errno": errno, "message": why})

    def _signed(self, authorization: str) -> Vapid:
        """``signed_vapid``, its signature verified once per distinct value: an application
        server sends the same JWT for hours (the claims are checked on every request)."""
        vapid = self._vapid.get(authorization)
        if vapid is None:
            vapid = signed_vapid(authorization)
            if len(self._vapid) >= MAX_KEPT_TOKENS:
                self._vapid.clear()
            self._vapid[authorization] = vapid
        return vapid

    def _subscription(self, path: str) -> tuple[int, _Browser]:
        found = _PATH.fullmatch(path)
        number = int(found.group(1)) if found else 0
        if number and number not in self._keys and self.any_number:
            self._keys[number] = _browser(number)
        return number, self._keys[number]

    def handle(self, fields: Fields, body: bytes, fault: str | None) -> Reply:
        if fault is not None:
            headers = {} if self.retry_after is None else {"retry-after": self.retry_after}
            status = int(fault)
            return json_reply(
                status, {"code": status, "errno": 999, "error": "scripted"}, **headers
            )
        headers = dict(fields)
        if headers.get(":method") != "POST":
            return self._refuse(405, "push messages are POSTed", 101)
        try:
            number, (key, auth, public) = self._subscription(headers.get(":path", ""))
        except KeyError:
            return self._refuse(404, "no such subscription", 102)
        if number in self._gone:
            return self._refuse(self._gone[number], "the subscription is gone", 106)
        if len(body) > self.max_push_bytes:
            return self._refuse(413, "the body is too large", 104)
        try:
            vapid = self._signed(headers.get("authorization", ""))
            check_claims(vapid, self.origin, time.time())
        except Unauthorized as refused:
            return self._refuse(refused.status, str(refused), 109)
        if self.application_server_key is not None and vapid.key != self.application_server_key:
            return self._refuse(403, "the key is not the subscription's", 109)
        problem = _header_problem(headers)
        if problem:
            return self._refuse(400, problem, 111)
        try:
            plaintext = decrypt(body, key, auth, public)
        except Undecryptable as error:
            return self._refuse(400, f"cannot decrypt: {error}", 110)
        self.decrypted += 1
        location = f"{self.origin}/message/{secrets.token_urlsafe(16)}"
        self.accepted.append(Push(number, plaintext, headers, vapid.token, location))
        return 201, {"location": location, "ttl": headers["ttl"]}, b""


def _header_problem(headers: dict[str, str]) -> str:
    """What is wrong with a push request's headers, or ""."""
    ttl = headers.get("ttl", "")
    if not ttl.isdigit():
        return "TTL is not an integer >= 0"
    if headers.get("urgency", "normal") not in URGENCIES:
        return "Urgency is not very-low, low, normal or high"
    if "topic" in headers and not _TOPIC.fullmatch(headers["topic"]):
        return "Topic is not 1 to 32 URL-safe base64 characters"
    if headers.get("content-encoding") != "aes128gcm":
        return "Content-Encoding is not aes128gcm"
    return ""
