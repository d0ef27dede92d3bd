"""A local APNs provider API, ``POST /3/device/<token>`` over HTTP/2 and TLS, as strict as
Apple's ("Sending notification requests to APNs", "Establishing a token-based connection to
APNs", "Handling notification responses from APNs").

Served over TLS (ALPN ``h2``, a certificate for 127.0.0.1 that clients trust through
``peer.ca.cert_pem``) by ``tests.peers.http2_serving``. The first check a request fails is
answered ``{"reason": ...}``:
405 MethodNotAllowed but for POST; 404 BadPath; 400 BadDeviceToken unless 64 hex digits;
403 MissingProviderToken, InvalidProviderToken (the JWT's header is not {alg ES256, kid} of
a key it knows, ``iss`` not that key's team, or the ES256 signature fails: verified once per
token, as APNs keeps a connection's token), ExpiredProviderToken (``iat`` over an hour old,
or expired by the fault); 400 DuplicateHeaders, MissingTopic, TopicDisallowed, InvalidPushType
(``apns-push-type`` alert with an alert, badge or sound, or background with only
``content-available: 1``), BadPriority (5 or 10; 5 for background), BadExpirationDate (not
digits), BadMessageId (``apns-id`` not a canonical UUID; one is made when absent),
BadCollapseId (over 64 bytes); 413 PayloadTooLarge over 4096 bytes; 400 PayloadEmpty for a
body that is no JSON object with an ``aps`` dictionary (APNs names no reason for that); then
``unregister(token)`` (410 Unregistered, with a timestamp) and ``script(token, status,
reason)``. An accepted request is kept in ``accepted`` as a ``Push`` (token, header fields,
decoded payload) and answered 200 with its ``apns-id``.

``fail(Fault.X, times=n)`` answers 429 TooManyRequests, 500 InternalServerError, 503
ServiceUnavailable or 403 ExpiredProviderToken (the token stays expired: only a new one
passes), holds requests until ``released`` (HANG) or drops the connection (DROP). The
protocol-level settings and faults (``max_streams``, ``delay``, ``goaway_after``, ``mute``)
and the counters are ``tests.peers.http2_serving``'s, as is ``serve(peer)``, which puts it on
the network for tests on ``h2`` (so every frame a client writes is read by the protocol
library, strictly). ``tests.peers.apns_standalone`` serves the same checks on another HTTP/2
implementation, in a process of its own, for benchmarks.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from tests.peers import http2_serving
from tests.peers.http2_serving import Fields, Http2Peer, Reply

PEER_TEAM_ID: Final = "PEERTEAM01"
PEER_KEY_ID: Final = "PEERKEY001"
PEER_TOPIC: Final = "com.example.clarion"
TOKEN_MAX_AGE: Final = 3600
MAX_PAYLOAD: Final = 4096
MAX_COLLAPSE_ID: Final = 64
_DEVICE = re.compile(r"/3/device/([^/]*)")
_TOKEN = re.compile(r"[0-9a-fA-F]{64}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


class Fault(StrEnum):
    TOO_MANY_REQUESTS = "429 TooManyRequests"
    ERROR = "500 InternalServerError"
    UNAVAILABLE = "503 ServiceUnavailable"
    EXPIRED_TOKEN = "403 ExpiredProviderToken"
    HANG = http2_serving.HANG
    DROP = http2_serving.DROP


@dataclass(frozen=True)
class Push:
    """One accepted notification."""

    token: str
    headers: dict[str, str]
    payload: dict[str, Any]
    apns_id: str


def refusal(status: int, reason: str, timestamp: int | None = None) -> Reply:
    body: dict[str, Any] = {"reason": reason}
    if timestamp is not None:
        body["timestamp"] = timestamp
    return status, {"content-type": "application/json"}, json.dumps(body).encode()


class ApnsPeer(Http2Peer):
    """The peer's state and its checks; ``http2_serving.serve`` or
    ``apns_standalone`` put it on the network."""

    def __init__(
        self,
        *,
        key: ec.EllipticCurvePrivateKey | None = None,
        topics: tuple[str, ...] = (PEER_TOPIC,),
        max_streams: int = 1000,
        delay: float = 0.0,
        goaway_after: int = 0,
    ) -> None:
        super().__init__(max_streams=max_streams, delay=delay, goaway_after=goaway_after)
        self.key = key or ec.generate_private_key(ec.SECP256R1())
        # kid -> (team id, public key)
        self.keys = {PEER_KEY_ID: (PEER_TEAM_ID, self.key.public_key())}
        self.topics = set(topics)
        # Every distinct provider token that verified, in the order first seen.
        self.provider_tokens: list[str] = []
        self.scripted: dict[str, Reply] = {}
        self.expired: set[str] = set()
        self._verified: dict[str, int] = {}

    @property
    def key_pem(self) -> str:
        """The signing key as Apple hands it out (a ``.p8`` file: PKCS#8 PEM)."""
        raw = self.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        return raw.decode()

    def unregister(self, token: str, timestamp_ms: int | None = None) -> None:
        """Answer ``token`` 410 Unregistered from now on."""
        stamp = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        self.scripted[token.lower()] = refusal(410, "Unregistered", stamp)

    def script(self, token: str, status: int, reason: str) -> None:
        self.scripted[token.lower()] = refusal(status, reason)

    def hung_reply(self) -> Reply:
        return refusal(500, "InternalServerError")

    def handle(self, fields: Fields, body: bytes, fault: str | None) -> Reply:
        """The answer to one request (``fault``: the switched-on fault it met, if any)."""
        headers = dict(fields)
        if fault is not None:
            if fault is Fault.EXPIRED_TOKEN:
                self.expired.add(headers.get("authorization", "").partition(" ")[2])
            status, reason = fault.split()
            reply = refusal(int(status), reason)
            if self.retry_after is not None and status in {"429", "503"}:
                reply[1]["retry-after"] = self.retry_after
            return reply
        if headers.get(":method") != "POST":
            return refusal(405, "MethodNotAllowed")
        device = _DEVICE.fullmatch(headers.get(":path", ""))
        if device is None:
            return refusal(404, "BadPath")
        token = device.group(1)
        if not _TOKEN.fullmatch(token):
            return refusal(400, "BadDeviceToken")
        refused = self._authorized(headers.get("authorization", ""))
        if refused:
            return refusal(403, refused)
        if len(headers) != len(fields):
            return refusal(400, "DuplicateHeaders")
        payload, problem = _payload(body)
        if problem:
            return refusal(413 if problem == "PayloadTooLarge" else 400, problem)
        problem = self._fields(headers, payload)
        if problem:
            return refusal(400, problem)
        if token.lower() in self.scripted:
            return self.scripted[token.lower()]
        apns_id = headers.get("apns-id") or str(uuid.uuid4()).upper()
        kept = {name: value for name, value in headers.items() if not name.startswith(":")}
        self.accepted.append(Push(token, kept, payload, apns_id))
        return 200, {"apns-id": apns_id}, b""

    def _authorized(self, authorization: str) -> str:
        """ "" when the provider token passes, else APNs' reason."""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return "MissingProviderToken"
        if token in self.expired:
            return "ExpiredProviderToken"
        issued = self._verified.get(token)
        if issued is None:
            issued = self._verify(token)
            if issued is None:
                return "InvalidProviderToken"
        if time.time() - issued > TOKEN_MAX_AGE:
            return "ExpiredProviderToken"
        return ""

    def _verify(self, token: str) -> int | None:
        """The token's ``iat`` when its header, issuer and signature are right."""
        try:
            header = jwt.get_unverified_header(token)
            team, public_key = self.keys[header.get("kid", "")]
            if header.get("alg") != "ES256":
                return None
            claims = jwt.decode(
                token,
                public_key,
                algorithms=["ES256"],
                issuer=team,
                options={"require": ["iss", "iat"], "verify_iat": False},
            )
        except (jwt.PyJWTError, KeyError):
            return None
        issued = claims["iat"]
        if not isinstance(issued, int):
            return None
        if len(self._verified) > 10_000:
            self._verified.clear()
        self._verified[token] = issued
        self.provider_tokens.append(token)
        return issued

    def _fields(self, headers: dict[str, str], payload: dict[str, Any]) -> str:
        """ "" when the apns-* fields are right for the payload, else APNs' reason."""
        topic = headers.get("apns-topic")
        if not topic:
            return "MissingTopic"
        if topic not in self.topics:
            return "TopicDisallowed"
        push_type, priority = headers.get("apns-push-type"), headers.get("apns-priority", "10")
        aps = payload["aps"]
        if push_type == "background":
            if aps != {"content-available": 1}:
                return "InvalidPushType"
            if priority != "5":
                return "BadPriority"
        elif push_type != "alert" or not {"alert", "badge", "sound"} & aps.keys():
            return "InvalidPushType"
        if priority not in {"5", "10"}:
            return "BadPriority"
        if not headers.get("apns-expiration", "0").isdigit():
            return "BadExpirationDate"
        if "apns-id" in headers and not _UUID.fullmatch(headers["apns-id"]):
            return "BadMessageId"
        if len(headers.get("apns-collapse-id", "").encode()) > MAX_COLLAPSE_ID:
            return "BadCollapseId"
        return ""


def _payload(body: bytes) -> tuple[dict[str, Any], str]:
    if len(body) > MAX_PAYLOAD:
        return {}, "PayloadTooLarge"
    try:
        payload = json.loads(body) if body else None
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict):
        return {}, "PayloadEmpty"
    return payload, ""
