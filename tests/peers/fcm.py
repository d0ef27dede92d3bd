"""A local FCM HTTP v1 API with its own OAuth 2 token endpoint, as strict as Google's, over
HTTP/2 and TLS as Google serves both (``tests.peers.http2_serving``: ALPN ``h2``, a
certificate clients trust through ``peer.ca.cert_pem``, every frame read by ``h2``).

``POST /token`` takes the JWT-bearer grant (RFC 7523): ``grant_type`` must be
``urn:ietf:params:oauth:grant-type:jwt-bearer`` and the ``assertion`` an RS256 JWT signed by
the service account's key (the peer made it and keeps its public half) with ``iss`` its
email, ``scope`` firebase.messaging, ``aud`` this endpoint's URL, ``iat`` and ``exp`` at
most an hour apart and ``exp`` ahead; anything else is answered 400 ``invalid_grant``. An
access token lives ``token_lifetime`` seconds.

``POST /v1/projects/{project}/messages:send`` needs a Bearer token the peer issued and that
has not run out (401 ``UNAUTHENTICATED``), the peer's project (403 ``PERMISSION_DENIED``),
and a message: a ``token``, ``data`` of strings only, ``android.priority`` NORMAL or HIGH,
``android.ttl`` in seconds (``"3600s"``), and at most 4096 bytes without its token (400
``INVALID_ARGUMENT`` otherwise). Errors come in Google's shape, with FCM's ``errorCode`` in
``details``. Scripted: ``unregister(token)`` (404 ``UNREGISTERED``), ``fail_with(status,
code, times=...)``, ``revoke_tokens()`` (the next send is 401), and ``fail(Fault.X,
times=...)`` for any request, token requests included: 429, 500 or 503 in Google's shape, a
request held until ``released`` (HANG) or a dropped connection (DROP).

``tests.peers.fcm_standalone`` serves the same checks on another HTTP/2 implementation, in a
process of its own, for benchmarks. ``GET /_peer/stats`` answers ``{"accepted", "requests",
"connections", "token_requests"}``.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.peers import http2_serving
from tests.peers.http2_serving import Fields, Http2Peer, Reply, json_reply

PROJECT: Final = "clarion-peer"
CLIENT_EMAIL: Final = "clarion@clarion-peer.iam.gserviceaccount.com"
SCOPE: Final = "https://www.googleapis.com/auth/firebase.messaging"
GRANT_TYPE: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_SEND = re.compile(r"/v1/projects/([a-z0-9-]+)/messages:send")
_TTL = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?s")
STATUS_NAMES: Final = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                       404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                       503: "UNAVAILABLE"}  # fmt: skip


class Fault(StrEnum):
    RATE_LIMITED = "429"
    ERROR = "500"
    UNAVAILABLE = "503"
    HANG = http2_serving.HANG
    DROP = http2_serving.DROP


@dataclass(frozen=True)
class Sent:
    """One message taken: the request's ``message`` object and its name."""

    message: dict[str, Any]
    name: str


def google_error(status: int, message: str, code: str = "", **headers: str) -> Reply:
    error: dict[str, Any] = {"code": status, "message": message,
                             "status": STATUS_NAMES.get(status, "UNKNOWN")}  # fmt: skip
    if code:
        error["details"] = [
            {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}
        ]
    return json_reply(status, {"error": error}, **headers)


class FcmPeer(Http2Peer):
    """The token endpoint and messages:send; ``accepted`` holds a ``Sent`` per message."""

    def __init__(self, origin: str = "", **options: Any) -> None:
        super().__init__(**options)
        self.origin = origin  # set once served: the token URL is part of the key file
        self.token_lifetime = 3600
        self.token_requests = 0
        # Seconds a JWT's times may be off (a test whose adapter's clock runs ahead).
        self.leeway = 0
        self.refusals: list[tuple[int, str]] = []
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._tokens: dict[str, float] = {}
        self._unregistered: set[str] = set()
        self._scripted: list[tuple[int, str, str | None]] = []

    def service_account_json(self) -> str:
        """The key file of the service account this peer trusts."""
        pem = self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        return json.dumps({
            "type": "service_account", "project_id": PROJECT, "private_key_id": "peer-key-1",
            "private_key": pem, "client_email": CLIENT_EMAIL,
            "token_uri": f"{self.origin}/token",
        })  # fmt: skip

    def unregister(self, token: str) -> None:
        self._unregistered.add(token)

    def fail_with(
        self, status: int, code: str, *, times: int = 1, retry_after: str | None = None
    ) -> None:
        """Answer the next ``times`` sends with ``status`` and FCM error ``code``."""
        self._scripted += [(status, code, retry_after)] * times

    def revoke_tokens(self) -> None:
        self._tokens.clear()

    def stats(self) -> dict[str, int]:
        return {**super().stats(), "token_requests": self.token_requests}

    def handle(self, fields: Fields, body: bytes, fault: str | None) -> Reply:
        if fault is not None:
            headers = {} if self.retry_after is None else {"retry-after": self.retry_after}
            return google_error(int(fault), "scripted", **headers)
        request = dict(fields)
        method, path = request.get(":method"), request.get(":path", "")
        if method == "POST" and path == "/token":
            return self._grant(body)
        found = _SEND.fullmatch(path)
        if method != "POST" or found is None:
            return google_error(404, "no such method")
        bearer = request.get("authorization", "").removeprefix("Bearer ")
        if self._tokens.get(bearer, 0.0) <= time.time():
            return self._refuse(
                google_error(401, "Request had invalid authentication credentials.")
            )
        if found.group(1) != PROJECT:
            return self._refuse(google_error(403, "Permission denied on the project"))
        problem, message = _message_problem(body)
        if problem:
            return self._refuse(google_error(400, problem, "INVALID_ARGUMENT"))
        if self._scripted:
            status, code, wait = self._scripted.pop(0)
            headers = {} if wait is None else {"retry-after": wait}
            return self._refuse(google_error(status, f"scripted {code}", code, **headers))
        if message["token"] in self._unregistered:
            return self._refuse(
                google_error(404, "Requested entity was not found.", "UNREGISTERED")
            )
        name = f"projects/{PROJECT}/messages/0:{secrets.token_hex(8)}"
        self.accepted.append(Sent(message, name))
        return json_reply(200, {"name": name})

    def _refuse(self, answer: Reply) -> Reply:
        self.refusals.append((answer[0], json.loads(answer[2])["error"]["status"]))
        return answer

    def _grant(self, body: bytes) -> Reply:
        self.token_requests += 1
        form = {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}
        try:
            if form.get("grant_type") != GRANT_TYPE:
                raise jwt.InvalidTokenError("unsupported grant_type")
            claims = jwt.decode(
                form.get("assertion", ""), self._key.public_key(), algorithms=["RS256"],
                audience=f"{self.origin}/token", issuer=CLIENT_EMAIL, leeway=self.leeway,
                options={"require": ["iss", "aud", "exp", "iat", "scope"]},
            )  # fmt: skip
            if claims["scope"] != SCOPE or claims["exp"] - claims["iat"] > 3600:
                raise jwt.InvalidTokenError("wrong scope or lifetime")
        except jwt.PyJWTError as error:
            refused = {"error": "invalid_grant", "error_description": str(error)}
            return json_reply(400, refused)
        token = "ya29." + secrets.token_urlsafe(32)
        self._tokens[token] = time.time() + self.token_lifetime
        granted = {"access_token": token, "expires_in": self.token_lifetime, "token_type": "Bearer"}
        return json_reply(200, granted)


def _message_problem(raw: bytes) -> tuple[str, dict[str, Any]]:
    """What is wrong with a messages:send body ("" if nothing), and its message."""
    try:
        message = json.loads(raw)["message"]
    except (ValueError, KeyError, TypeError):
        return "Invalid JSON payload received.", {}
    if not isinstance(message, dict) or not isinstance(message.get("token"), str):
        return "The message must name a token.", {}
    data = message.get("data", {})
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        return "Invalid value at 'message.data': data values must be strings", message
    android = message.get("android", {})
    if android.get("priority", "NORMAL") not in {"NORMAL", "HIGH"}:
        return "Invalid value at 'message.android.priority'", message
    if not _TTL.fullmatch(str(android.get("ttl", "0s"))):
        return "Invalid value at 'message.android.ttl'", message
    if len(raw) - len(message["token"]) > 4096:
        return "Message is too big", message
    return "", message
