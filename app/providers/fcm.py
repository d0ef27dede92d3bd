"""The ``fcm`` provider kind: push through the Firebase Cloud Messaging HTTP v1 API.

One ``POST {base_url}/v1/projects/{project_id}/messages:send`` per message, JSON
``{"message": {...}}`` addressed to the device's registration token, with
``Authorization: Bearer <access token>``. The answer 200 is ``{"name": "projects/<p>/messages/
<id>"}``, the message id.

Access tokens come from the service account's key by OAuth 2's JWT-bearer grant (RFC 7523, as
Google documents it for service accounts): an RS256 JWT (``iss`` the account's email,
``scope`` firebase.messaging, ``aud`` the key file's ``token_uri``, an hour's lifetime) is
POSTed to ``token_uri``, which answers ``{"access_token", "expires_in"}``. The token is kept
and made anew shortly before it ends (``REFRESH_BEFORE_SECONDS``); sends that need one while
it is being made wait for that one request (never one token request per send). A 401 from
messages:send drops the kept token and retries once with a new one.

The message (``payload``) carries the title and body as ``notification``, the template's
data as ``data`` (FCM takes strings only; the link is added as ``data.link``), and each
platform's options: Android's priority, ``ttl`` (the time left at this attempt) and
``collapse_key``; APNs's ``apns-priority``, ``apns-expiration`` and ``apns-collapse-id``;
Web Push's ``TTL``, ``Urgency`` and ``fcm_options.link``. FCM refuses a message over 4096
bytes; the encoded message less its token is checked against that before sending.

Errors are read by FCM's ``errorCode`` in ``error.details`` (firebase.google.com/docs/
reference/fcm/rest/v1/ErrorCode): ``UNREGISTERED`` (and a 404 without one) and
``SENDER_ID_MISMATCH`` (the token belongs to another project: it never works for this one)
are PERMANENT ``invalid_address``; ``INVALID_ARGUMENT`` PERMANENT ``rejected``;
``QUOTA_EXCEEDED`` and ``UNAVAILABLE`` TRANSIENT and not accepted, ``INTERNAL`` TRANSIENT,
each after ``Retry-After``; ``THIRD_PARTY_AUTH_ERROR`` (the APNs or Web Push credentials
behind FCM) TRANSIENT and not accepted.

The transport is Clarion's HTTP/2 client (``app.providers.http2``), as for APNs: FCM's
endpoint speaks HTTP/2, and so does Google's token endpoint. A worker keeps ``connections``
TLS connections (default 1) to ``base_url``, each carrying many sends at once as streams,
the frames of all the sends of a loop turn written together; the token request goes over
the same connection when ``token_uri`` is on the same host and port, else over one
connection of its own (``oauth2.googleapis.com`` beside ``fcm.googleapis.com``). Both trust
``ca_file`` when it is set, else certifi's authorities. So ``base_url`` (and the service
account's ``token_uri``) must be https. Against the local peer the HTTP/1.1 client this
adapter had before (aiohttp, one request per connection at a time, a syscall each way per
request) cost 220 to 280 µs of CPU a send; this one costs 120 to 140 µs with 8 sends in
flight and under 80 µs with 128 (``bench/fcm_client.py``, ``bench/HISTORY.md``).

A failure of the transport is classified as ``http2.Client`` does: not accepted when the
request certainly never left (no connection, TLS refused, the stream refused), else it may
have sent, and FCM has no idempotency key: a retry after an ambiguous failure (a time-out, a
500) may show the notification twice. A failed token request never sent the message: it is
always TRANSIENT and not accepted, whatever became of the token request itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import urlencode

import jwt
import msgspec
from yarl import URL

from app.catalog.push import FcmConfig, parse_address, service_account
from app.providers import http, http2
from app.providers.base import Message, ProviderError, Reason
from streams.core.vocabulary import ErrorClass, Priority

SCOPE: Final = "https://www.googleapis.com/auth/firebase.messaging"
GRANT_TYPE: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ASSERTION_SECONDS: Final = 3600
# A kept access token is made anew when less than this is left of it (or a tenth of its
# lifetime, when that is shorter).
REFRESH_BEFORE_SECONDS: Final = 300
MAX_MESSAGE_BYTES: Final = 4096
MAX_COLLAPSE_ID_BYTES: Final = 64
INVALID_ADDRESS_CODES: Final = frozenset({"UNREGISTERED", "SENDER_ID_MISMATCH"})
NOT_ACCEPTED_CODES: Final = frozenset({"QUOTA_EXCEEDED", "UNAVAILABLE", "THIRD_PARTY_AUTH_ERROR"})
URGENCY: Final = {Priority.HIGH: "high", Priority.NORMAL: "normal", Priority.LOW: "low"}
_JSON: Final = (b"content-type", b"application/json")
_FORM: Final = ((b"content-type", b"application/x-www-form-urlencoded"),)

_encode = msgspec.json.Encoder().encode


class _Detail(msgspec.Struct):
    errorCode: str = ""


class _Error(msgspec.Struct):
    code: int = 0
    message: str = ""
    status: str = ""
    details: list[_Detail] = []


class _Answer(msgspec.Struct):
    name: str = ""
    error: _Error | None = None


class _Token(msgspec.Struct):
    access_token: str = ""
    expires_in: int = 0


_decode_answer = msgspec.json.Decoder(_Answer).decode
_decode_token = msgspec.json.Decoder(_Token).decode


def seconds_left(expires_ms: int, now: float) -> int:
    """Whole seconds until ``expires_ms`` at ``now`` (a day when unknown), at least 0."""
    if expires_ms <= 0:
        return 86400
    return max(0, (expires_ms - int(now * 1000)) // 1000)


def collapse_id(key: str) -> str:
    """An APNs collapse id for ``key``: itself when it fits 64 bytes, else its SHA-256 in hex."""
    return (
        key
        if len(key.encode()) <= MAX_COLLAPSE_ID_BYTES
        else hashlib.sha256(key.encode()).hexdigest()
    )


def payload(message: Message, token: str, now: float) -> dict[str, Any]:
    """The ``message`` object of a messages:send request."""
    push, high = message.push, message.priority is Priority.HIGH
    left = seconds_left(message.expires_ms, now)
    data = dict(push.data)
    if push.link:
        data.setdefault("link", push.link)
    android: dict[str, Any] = {"priority": "HIGH" if high else "NORMAL", "ttl": f"{left}s"}
    apns_headers = {"apns-priority": "10" if high else "5", "apns-expiration": str(int(now) + left)}
    aps: dict[str, Any] = {}
    if push.sound:
        android["notification"] = {"sound": push.sound}
        aps["sound"] = push.sound
    if push.badge is not None:
        aps["badge"] = push.badge
    if push.collapse_key:
        android["collapse_key"] = push.collapse_key
        apns_headers["apns-collapse-id"] = collapse_id(push.collapse_key)
    webpush: dict[str, Any] = {"headers": {"TTL": str(left), "Urgency": URGENCY[message.priority]}}
    if push.link.startswith("https://"):
        webpush["fcm_options"] = {"link": push.link}
    body: dict[str, Any] = {
        "token": token,
        "notification": {"title": message.title, "body": message.body},
        "android": android,
        "apns": {"headers": apns_headers, "payload": {"aps": aps}},
        "webpush": webpush,
    }
    if data:
        body["data"] = data
    return body


class FcmProvider:
    """Sends push notifications through FCM over HTTP/2, with cached OAuth access tokens."""

    def __init__(
        self,
        name: str,
        config: FcmConfig,
        secrets: Mapping[str, str],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        try:
            self._account, self._key = service_account(secrets.get("service_account_env", ""))
        except ValueError as error:
            variable = config.service_account_env
            raise ValueError(f"{name}: service_account_env ({variable}) {error}") from None
        base, token_url = URL(config.base_url), URL(self._account.token_uri)
        self._path = f"{base.raw_path.rstrip('/')}/v1/projects/{config.project_id}/messages:send"
        self._token_path = token_url.raw_path_qs
        self._clock = clock
        self._client = http2.Client(
            name, config, config.base_url, config.ca_file, config.connections
        )
        same_server = (token_url.raw_host, token_url.port) == (base.raw_host, base.port)
        self._token_client = (
            self._client
            if same_server
            else http2.Client(name, config, self._account.token_uri, config.ca_file)
        )
        self._authorization = b""  # "Bearer <access token>", while it is kept
        self._renew_at = 0.0
        self._making: asyncio.Future[bytes] | None = None
        # Token requests made (a test and the benchmark read it).
        self.token_requests = 0

    async def send(self, message: Message) -> str:
        """Hand ``message`` to FCM; the message's name, or ``ProviderError``."""
        token = parse_address(message.address).token
        content = payload(message, token, self._clock())
        body = _encode({"message": content})
        size = len(body) - len(token)
        if size > MAX_MESSAGE_BYTES:
            raise ProviderError(
                ErrorClass.PERMANENT,
                f"{self.name}: the message is {size} bytes, over FCM's {MAX_MESSAGE_BYTES}",
                reason=Reason.PAYLOAD_TOO_LARGE,
                not_accepted=True,
            )
        authorization = await self._access_token()
        response = await self._post(authorization, body)
        if response.status == 401:  # the access token was revoked or ran out early
            if self._authorization == authorization:  # no other send has replaced it yet
                self._authorization = b""
            response = await self._post(await self._access_token(), body)
        parsed = _parsed(response.body)
        if 200 <= response.status < 300:
            return parsed.name or message.delivery_id
        raise self._error(http2.answer(response), parsed, token)

    async def close(self) -> None:
        """Close the connections."""
        await self._client.close()
        if self._token_client is not self._client:
            await self._token_client.close()

    async def _post(self, authorization: bytes, body: bytes) -> http2.Response:
        fields = ((b"authorization", authorization), _JSON)
        return await self._client.request(b"POST", self._path, fields, body)

    async def _access_token(self) -> bytes:
        """The kept access token as an authorization value, or a new one (one request,
        whoever else waits for it)."""
        if self._authorization and self._clock() < self._renew_at:
            return self._authorization
        if self._making is None:
            self._making = asyncio.ensure_future(self._new_token())
            self._making.add_done_callback(self._made)
        return await asyncio.shield(self._making)

    def _made(self, making: asyncio.Future[bytes]) -> None:
        self._making = None
        if not making.cancelled():
            making.exception()  # retrieved: waiters each raise it themselves

    async def _new_token(self) -> bytes:
        self.token_requests += 1
        now = self._clock()
        claims = {
            "iss": self._account.client_email,
            "scope": SCOPE,
            "aud": self._account.token_uri,
            "iat": int(now),
            "exp": int(now) + ASSERTION_SECONDS,
        }
        kid = {"kid": self._account.private_key_id} if self._account.private_key_id else None
        assertion = jwt.encode(claims, self._key, algorithm="RS256", headers=kid)
        form = urlencode({"grant_type": GRANT_TYPE, "assertion": assertion}).encode()
        try:
            response = await self._token_client.request(b"POST", self._token_path, _FORM, form)
        except ProviderError as error:  # the message itself was not sent either way
            what = error.message.removeprefix(f"{self.name}: ").removesuffix(": it may have sent")
            raise ProviderError(
                ErrorClass.TRANSIENT,
                f"{self.name}: no access token (token endpoint: {what}); nothing was sent",
                not_accepted=True,
            ) from None
        try:
            token = _decode_token(response.body) if response.status == 200 else _Token()
        except (msgspec.DecodeError, msgspec.ValidationError):
            token = _Token()
        if not token.access_token or token.expires_in <= 0:
            raise ProviderError(
                ErrorClass.TRANSIENT,
                f"{self.name}: the token endpoint refused the service account (HTTP "
                f"{response.status}): check the key in {self.name}'s service_account_env",
                retry_after=http.retry_after(http2.answer(response)),
                not_accepted=True,
            )
        lifetime = token.expires_in
        self._renew_at = now + lifetime - min(REFRESH_BEFORE_SECONDS, lifetime / 10)
        self._authorization = b"Bearer " + token.access_token.encode()
        return self._authorization

    def _error(self, answer: http.Answer, parsed: _Answer, token: str) -> ProviderError:
        """The ``ProviderError`` for an answer other than 2xx, by FCM's error code first."""
        error = parsed.error or _Error()
        code = next((d.errorCode for d in error.details if d.errorCode), "")
        words = http.quoted(f"{code or error.status or '-'} {error.message}".strip(), token)
        text = f"{self.name}: HTTP {answer.status}: {words}"
        wait = http.retry_after(answer)
        if code in INVALID_ADDRESS_CODES or (answer.status == 404 and not code):
            return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.INVALID_ADDRESS)
        if code == "INVALID_ARGUMENT":
            return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.REJECTED)
        if code in NOT_ACCEPTED_CODES or answer.status == 401:
            return ProviderError(ErrorClass.TRANSIENT, text, retry_after=wait, not_accepted=True)
        if code == "INTERNAL":
            return ProviderError(ErrorClass.TRANSIENT, text, retry_after=wait)
        return http.status_error(self.name, answer, words)


def _parsed(body: bytes) -> _Answer:
    """FCM's JSON answer; an empty one when the body is not that (a proxy's page)."""
    try:
        return _decode_answer(body) if body else _Answer()
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _Answer()
