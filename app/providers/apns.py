"""The ``apns`` provider kind: push notifications to Apple devices through the APNs provider
API, over HTTP/2 (``app.providers.http2``) with token-based authentication.

One ``POST {base_url}/3/device/<device token>`` per message (developer.apple.com, "Sending
notification requests to APNs"), with these header fields:

- ``authorization: bearer <JWT>``: ES256, header {alg, kid: key_id}, claims {iss: team_id,
  iat}, signed with the ``.p8`` key ("Establishing a token-based connection to APNs"). Apple
  refuses a token over an hour old and one made more often than every 20 minutes
  (TooManyProviderTokenUpdates), so one token serves every send for ``TOKEN_REUSE_SECONDS``
  (50 minutes). A 403 ExpiredProviderToken makes a new one and the request is sent once more
  (concurrent sends that met the same stale token share one new token). A token younger
  than ``MIN_TOKEN_AGE_SECONDS`` refused as expired means a wrong clock, not a stale token:
  it is kept and the send fails TRANSIENT, not accepted, as every other 403
  (InvalidProviderToken, a wrong key or team: an operator can fix it, a backup may send).
- ``apns-topic``: the app's bundle id; ``apns-push-type``: the catalog's ``push_type``;
  ``apns-priority``: 10 for HIGH, else 5 (power-considerate), and always 5 for background
  pushes, which Apple refuses at 10.
- ``apns-expiration``: the Unix second the notification's TTL ends (``expires_ms``, rounded
  down). Under a second left, or already past: 0, which APNs reads as "try once, do not
  store". A message without a TTL (``expires_ms`` 0) is kept ``DEFAULT_STORE_SECONDS``.
- ``apns-id``: the delivery id when it is a canonical UUID (every delivery's is, a UUIDv7),
  the same on every attempt, so APNs' answers and logs name the delivery; else none is sent
  and APNs makes one.
- ``apns-collapse-id`` when the push parts have a collapse key. APNs takes at most 64 bytes;
  a longer key is sent as the base64url SHA-256 of it (43 characters), so the same key
  always makes the same id.

The payload is JSON, at most 4,096 bytes (checked before anything is sent: PERMANENT
PAYLOAD_TOO_LARGE): ``{"aps": {"alert": {"title", "body"}, "badge"?, "sound"?}, ...data,
"link"?}``. The template's data keys go at the top level, where the app's delegate reads
custom keys (a data key ``aps`` is dropped: it would replace Apple's dictionary). APNs has no
field for a deep link, so it is the custom key ``link``, which the app opens when the user
taps the notification (it wins over a data key of that name). A background push (``push_type
= "background"``) is ``{"aps": {"content-available": 1}, ...data, "link"?}``: no alert, badge
or sound, which Apple forbids in one.

Answers ("Handling notification responses from APNs"; errors are ``{"reason", "timestamp"?}``):
200 is sent, the id is the ``apns-id`` APNs answered (else the delivery id). Unregistered
(410) and BadDeviceToken: the token is dead, PERMANENT INVALID_ADDRESS. DeviceTokenNotForTopic
is REJECTED, not INVALID_ADDRESS: it also follows from a wrong ``topic`` in the catalog, and
would then mark every recipient's device dead at once. PayloadTooLarge: PAYLOAD_TOO_LARGE;
other 400 reasons (BadCollapseId, BadExpirationDate, MissingTopic, TopicDisallowed...):
REJECTED, except IdleTimeout (the connection's fault: TRANSIENT, not accepted). 429 (also
TooManyProviderTokenUpdates) and 503: TRANSIENT, not accepted; 500: TRANSIENT. Error texts name
the provider, the status and Apple's reason, never the device token or the JWT.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Callable, Mapping
from typing import Final

import jwt
import msgspec
import structlog
from cryptography.hazmat.primitives.asymmetric import ec

from app.catalog.push import ApnsConfig, Platform, p256_key, parse_address
from app.providers import http, http2
from app.providers.base import Message, ProviderError, Reason
from streams.core.vocabulary import ErrorClass, Priority

MAX_PAYLOAD_BYTES: Final = 4096
MAX_COLLAPSE_ID_BYTES: Final = 64
TOKEN_REUSE_SECONDS: Final = 50 * 60
MIN_TOKEN_AGE_SECONDS: Final = 60
# How long APNs keeps a notification without a TTL for an offline device: four weeks (it
# keeps one for a limited time anyway).
DEFAULT_STORE_SECONDS: Final = 28 * 24 * 3600
INVALID_ADDRESS_REASONS: Final = frozenset(
    {"BadDeviceToken", "Unregistered", "ExpiredToken", "MissingDeviceToken"}
)

# A device token: hex, 32 bytes today; Apple warns the length may change.
_DEVICE_TOKEN = re.compile(r"(?:[0-9A-Fa-f]{2}){8,100}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_REASON = re.compile(r"[A-Za-z]{1,64}")

_log = structlog.get_logger(__name__)


class _Refusal(msgspec.Struct):
    reason: str = ""
    timestamp: int | None = None


_decode_refusal = msgspec.json.Decoder(_Refusal).decode


def payload(message: Message, push_type: str) -> bytes:
    """The notification's JSON payload (see the module documentation)."""
    push = message.push
    if push_type == "background":
        aps: dict[str, object] = {"content-available": 1}
    else:
        alert = {}
        if message.title:
            alert["title"] = message.title
        if message.body:
            alert["body"] = message.body
        aps = {"alert": alert}
        if push.badge is not None:
            aps["badge"] = push.badge
        if push.sound:
            aps["sound"] = push.sound
    content: dict[str, object] = {"aps": aps}
    content.update((key, value) for key, value in push.data.items() if key != "aps")
    if push.link:
        content["link"] = push.link
    return msgspec.json.encode(content)


def collapse_id(key: str) -> str:
    """The ``apns-collapse-id`` of a collapse key: itself if it fits, else its hash."""
    if len(key.encode()) <= MAX_COLLAPSE_ID_BYTES:
        return key
    return base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest()).decode().rstrip("=")


def expiration(expires_ms: int, now: float) -> int:
    """The ``apns-expiration`` for a TTL ending at ``expires_ms`` (Unix ms), at ``now``."""
    if expires_ms <= 0:
        return int(now) + DEFAULT_STORE_SECONDS
    if expires_ms - now * 1000 < 1000:
        return 0
    return expires_ms // 1000


class ProviderToken:
    """The ``authorization`` value of one signing key: a JWT reused while it is young."""

    def __init__(
        self, key: ec.EllipticCurvePrivateKey, team_id: str, key_id: str, clock: Callable[[], float]
    ) -> None:
        self._key = key
        self._team_id = team_id
        self._key_id = key_id
        self._clock = clock
        self._value = b""
        self._issued = 0.0

    def value(self) -> bytes:
        """``bearer <JWT>``, signed anew once the kept one is ``TOKEN_REUSE_SECONDS`` old."""
        if not self._value or self._clock() - self._issued >= TOKEN_REUSE_SECONDS:
            self._sign()
        return self._value

    def refresh(self, stale: bytes) -> bool:
        """APNs found ``stale`` expired: whether a new token was made (or already was)."""
        if stale != self._value:
            return True
        if self._clock() - self._issued < MIN_TOKEN_AGE_SECONDS:
            return False
        self._sign()
        return True

    def _sign(self) -> None:
        now = self._clock()
        token = jwt.encode(
            {"iss": self._team_id, "iat": int(now)},
            self._key,
            algorithm="ES256",
            headers={"kid": self._key_id, "typ": None},
        )
        self._value = b"bearer " + token.encode()
        self._issued = now


class ApnsProvider:
    """Sends push notifications through APNs, over one ``http2.Client``."""

    def __init__(
        self,
        name: str,
        config: ApnsConfig,
        secrets: Mapping[str, str],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        try:
            key = p256_key(secrets.get("key_env", ""))
        except ValueError as error:
            raise ValueError(f"{name}: key_env ({config.key_env}) {error}") from None
        self._clock = clock
        self.token = ProviderToken(key, config.team_id, config.key_id, clock)
        self._push_type = config.push_type
        background = config.push_type == "background"
        # The fields every request carries, encoded once.
        self._fixed = [
            (b"apns-topic", config.topic.encode()),
            (b"apns-push-type", config.push_type.encode()),
        ]
        self._priority = {
            priority: b"5" if background or priority is not Priority.HIGH else b"10"
            for priority in Priority
        }
        self._client = http2.Client(
            name, config, config.base_url, config.ca_file, config.connections
        )

    async def send(self, message: Message) -> str:
        """Push ``message`` to its device; the ``apns-id``, or ``ProviderError``."""
        target = parse_address(message.address)
        if target.platform not in {None, Platform.APNS}:
            # A routing mistake, not a dead address: the address stays the recipient's.
            raise self._unsent(f"the address is a {target.platform} target", Reason.REJECTED)
        if not _DEVICE_TOKEN.fullmatch(target.token):
            raise self._unsent("the address is not a device token (hex)", Reason.INVALID_ADDRESS)
        body = payload(message, self._push_type)
        if len(body) > MAX_PAYLOAD_BYTES:
            raise self._unsent(
                f"the payload is {len(body)} bytes, over APNs' {MAX_PAYLOAD_BYTES}",
                Reason.PAYLOAD_TOO_LARGE,
            )
        path = "/3/device/" + target.token
        fields = self._fields(message)
        authorization = self.token.value()
        response = await self._post(path, authorization, fields, body)
        if (
            response.status == 403
            and _refusal(response.body).reason == "ExpiredProviderToken"
            and self.token.refresh(authorization)
        ):
            _log.info("apns_provider_token_renewed", provider=self.name)
            response = await self._post(path, self.token.value(), fields, body)
        if response.status == 200:
            return response.headers.get("apns-id") or message.delivery_id
        raise self._error(response)

    async def _post(
        self, path: str, authorization: bytes, fields: list[tuple[bytes, bytes]], body: bytes
    ) -> http2.Response:
        request = [(b"authorization", authorization), *fields]
        return await self._client.request(b"POST", path, request, body)

    async def close(self) -> None:
        """Close the connections."""
        await self._client.close()

    def _fields(self, message: Message) -> list[tuple[bytes, bytes]]:
        when = expiration(message.expires_ms, self._clock())
        fields = [
            *self._fixed,
            (b"apns-priority", self._priority[message.priority]),
            (b"apns-expiration", b"%d" % when),
        ]
        if _UUID.fullmatch(message.delivery_id):
            fields.append((b"apns-id", message.delivery_id.encode()))
        if message.push.collapse_key:
            collapse = collapse_id(message.push.collapse_key).encode()
            fields.append((b"apns-collapse-id", collapse))
        return fields

    def _error(self, response: http2.Response) -> ProviderError:
        """The ``ProviderError`` for an answer other than 200, by Apple's reason first."""
        refusal = _refusal(response.body)
        status, reason = response.status, refusal.reason
        text = f"{self.name}: HTTP {status}" + (f": {reason}" if reason else "")
        if reason in INVALID_ADDRESS_REASONS or status == 410:
            if refusal.timestamp is not None:
                text += f" (since {refusal.timestamp} ms)"
            return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.INVALID_ADDRESS)
        if reason == "PayloadTooLarge" or status == 413:
            return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.PAYLOAD_TOO_LARGE)
        if status == 400 and reason != "IdleTimeout":
            return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.REJECTED)
        if status in {400, 403}:
            return ProviderError(ErrorClass.TRANSIENT, text, not_accepted=True)
        return http.status_error(self.name, http2.answer(response), reason)

    def _unsent(self, text: str, reason: Reason) -> ProviderError:
        return ProviderError(
            ErrorClass.PERMANENT, f"{self.name}: {text}", reason=reason, not_accepted=True
        )


def _refusal(body: bytes) -> _Refusal:
    """Apple's error answer; its reason only when it is one (letters, as Apple's are)."""
    try:
        refusal = _decode_refusal(body) if body[:1] == b"{" else _Refusal()
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _Refusal()
    if not _REASON.fullmatch(refusal.reason):
        refusal.reason = ""
    return refusal
