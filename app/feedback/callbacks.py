"""Each provider's callback scheme: who signed a callback, whether it is fresh, and what it
says, as ``Feedback`` items.

Three schemes, chosen by the provider's kind in the catalog:

- ``twilio``: status callbacks (form fields ``MessageSid``, ``MessageStatus``, ``To``,
  ``ErrorCode``), signed in ``X-Twilio-Signature``: the base64 HMAC-SHA1, keyed with the
  account's auth token, of the URL Twilio called followed by every field's name and value,
  sorted by name. Twilio signs no time, so a callback cannot be told stale; a replay is
  recognised for a day by its message and status. ``delivered`` is delivered;
  ``undelivered`` and ``failed`` are undelivered, and for error 21610 (the number texted
  STOP) the number is suppressed (``stop``), for 21211, 21614, 30005 and 30006 (not a
  number that can take SMS) it is an ``invalid_address``. Other statuses (queued, sent...)
  are taken and ignored.
- ``sendgrid``: Event Webhook batches, signed with ECDSA P-256 over the
  ``X-Twilio-Email-Event-Webhook-Timestamp`` header followed by the body, the signature in
  ``X-Twilio-Email-Event-Webhook-Signature`` (base64 DER), checked with the verification key
  the catalog gives. ``delivered``; ``bounce`` of type bounce is bounced (``hard_bounce``),
  of type blocked undelivered; ``dropped`` undelivered; ``spamreport`` complained
  (``complaint``); ``unsubscribe`` and ``group_unsubscribe`` unsubscribed
  (``unsubscribed``). Each event's ``sg_event_id`` is its id, ``sg_message_id`` up to its
  first dot the message id (SendGrid appends a filter's suffix to the ``X-Message-Id`` it
  answered).
- any other kind with ``feedback_secret_env``: Standard Webhooks (``webhook-id``,
  ``webhook-timestamp``, ``webhook-signature``), one event per callback or a JSON array of
  them: ``{"message_id", "feedback": delivered|bounced|undelivered|complained|unsubscribed|
  token_invalid, "detail"?, "address"?, "channel"?}``; an event of an array is known by
  ``<webhook-id>:<index>``. A bounce, a complaint, an unsubscribe or a dead
  token naming the address puts it on the suppression list.

A signed time older than ``MAX_AGE_S`` (or as far ahead) is stale. A callback is taken once:
its replay is refused for twice ``MAX_AGE_S`` after (a day for Twilio). Texts a provider sends
back are masked like any log text and cut short.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from app.catalog import Catalog
from app.catalog.providers import (
    SendgridConfig,
    TwilioConfig,
    event_webhook_key,
    signing_key,
)
from app.logging import mask
from app.recipients.addresses import masked
from streams.feedback import Feedback, FeedbackKind
from streams.recipient_settings import AddressDigest
from streams.vocabulary import Channel

MAX_AGE_S: Final = 300
TWILIO_GUARD_MS: Final = 86_400_000
MAX_DETAIL: Final = 200
MAX_EVENTS: Final = 10_000  # in one SendGrid batch
TWILIO_STOP: Final = frozenset({"21610"})
TWILIO_NO_SMS_NUMBER: Final = frozenset({"21211", "21614", "30005", "30006"})
SUPPRESSION_OF: Final[dict[str, str]] = {
    "bounced": "hard_bounce", "complained": "complaint", "unsubscribed": "unsubscribed",
    "token_invalid": "invalid_token",
}  # fmt: skip
_KINDS: Final = frozenset(SUPPRESSION_OF) | {"delivered", "undelivered"}


class Refused(Exception):
    """The callback is not taken: ``status`` and what is wrong with it."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Callback:
    """An HTTP request a provider made to ``/v1/feedback/<name>``."""

    url: str  # as the provider called it (the public URL), query included
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    received_ms: int


@dataclass(frozen=True, slots=True)
class Taken:
    """What a verified callback holds, and the key its replay is known by."""

    replay_key: str
    guard_ms: int
    items: list[Feedback]


def _detail(text: object) -> str:
    if not text:
        return ""
    masked_text = mask(str(text))
    return masked_text[:MAX_DETAIL]


class _Addresses:
    """Names the address a callback gives, for the suppression list."""

    def __init__(self, digest: AddressDigest) -> None:
        self.digest = digest

    def item(self, base: Feedback, suppress: str, channel: str, address: str) -> Feedback:
        if not suppress or not address or not channel:
            return base
        return msgspec.structs.replace(
            base, suppress=suppress, channel=channel, address_digest=self.digest(address),
            display=masked(channel, address),
        )  # fmt: skip


def _fresh(timestamp: str, now_ms: int) -> int:
    """The signed time in ms; ``Refused`` when it is no number or stale."""
    if not timestamp.isdigit() or len(timestamp) > 12:
        raise Refused(400, "timestamp: a Unix time in seconds is required")
    at_ms = int(timestamp) * 1000
    if abs(now_ms - at_ms) > MAX_AGE_S * 1000:
        raise Refused(400, f"timestamp: more than {MAX_AGE_S} s away from now (stale)")
    return at_ms


class TwilioStatus(_Addresses):
    """Twilio's status callbacks."""

    signs_url: Final = True  # the signature covers the URL Twilio called

    def __init__(self, provider: str, auth_token: str, digest: AddressDigest) -> None:
        super().__init__(digest)
        self.provider = provider
        self._token = auth_token.encode()

    def read(self, callback: Callback) -> Taken:
        fields = parse_qsl(callback.body.decode("utf-8", "replace"), keep_blank_values=True)
        signed = callback.url + "".join(name + value for name, value in sorted(fields))
        expected = base64.b64encode(hmac.digest(self._token, signed.encode(), "sha1")).decode()
        given = callback.headers.get("x-twilio-signature", "")
        if not given or not hmac.compare_digest(given, expected):
            raise Refused(401, "X-Twilio-Signature: missing or not the callback's signature")
        values = dict(fields)
        sid, status = values.get("MessageSid", ""), values.get("MessageStatus", "")
        if not sid or not status:
            raise Refused(400, "MessageSid and MessageStatus are required")
        code = values.get("ErrorCode", "")
        key = f"{sid}:{status}:{code}"
        if status not in ("delivered", "undelivered", "failed"):
            return Taken(key, TWILIO_GUARD_MS, [])
        kind: FeedbackKind = "delivered" if status == "delivered" else "undelivered"
        suppress = "stop" if code in TWILIO_STOP else ""
        suppress = suppress or ("invalid_address" if code in TWILIO_NO_SMS_NUMBER else "")
        detail = f"Twilio {status}" + (f" (error {code})" if code else "")
        item = Feedback(
            provider=self.provider, feedback_id=key, message_id=sid, kind=kind,
            detail=_detail(detail), at_ms=callback.received_ms,
            received_ms=callback.received_ms,
        )  # fmt: skip
        item = self.item(item, suppress, Channel.SMS, values.get("To", ""))
        return Taken(key, TWILIO_GUARD_MS, [item])


class _SendgridEvent(msgspec.Struct, frozen=True):
    event: str = ""
    sg_event_id: str = ""
    sg_message_id: str = ""
    email: str = ""
    timestamp: int = 0
    type: str = ""
    reason: str = ""


_events = msgspec.json.Decoder(list[_SendgridEvent])
_SENDGRID_KINDS: Final[dict[str, FeedbackKind]] = {
    "delivered": "delivered", "dropped": "undelivered", "spamreport": "complained",
    "unsubscribe": "unsubscribed", "group_unsubscribe": "unsubscribed",
}  # fmt: skip


class SendgridEvents(_Addresses):
    """SendGrid's signed Event Webhook."""

    signs_url: Final = False

    def __init__(self, provider: str, public_key: ec.EllipticCurvePublicKey, digest: AddressDigest):
        super().__init__(digest)
        self.provider = provider
        self._key = public_key

    def read(self, callback: Callback) -> Taken:
        signature = callback.headers.get("x-twilio-email-event-webhook-signature", "")
        timestamp = callback.headers.get("x-twilio-email-event-webhook-timestamp", "")
        try:
            der = base64.b64decode(signature, validate=True)
            self._key.verify(der, timestamp.encode() + callback.body, ec.ECDSA(hashes.SHA256()))
        except (binascii.Error, ValueError, InvalidSignature):
            raise Refused(401, "X-Twilio-Email-Event-Webhook-Signature: not the body's") from None
        _fresh(timestamp, callback.received_ms)
        try:
            events = _events.decode(callback.body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise Refused(400, "body: a JSON array of SendGrid events is required") from None
        if len(events) > MAX_EVENTS:
            raise Refused(413, f"body: at most {MAX_EVENTS} events in one callback")
        items = [self._item(event, callback.received_ms) for event in events]
        replay = hashlib.sha256(signature.encode()).hexdigest()[:32]
        return Taken(replay, 2 * MAX_AGE_S * 1000, [item for item in items if item])

    def _item(self, event: _SendgridEvent, received_ms: int) -> Feedback | None:
        kind = _SENDGRID_KINDS.get(event.event)
        if event.event == "bounce":
            kind = "undelivered" if event.type == "blocked" else "bounced"
        if kind is None or not event.sg_message_id or not event.sg_event_id:
            return None
        item = Feedback(
            provider=self.provider, feedback_id=event.sg_event_id,
            message_id=event.sg_message_id.split(".", 1)[0], kind=kind,
            detail=_detail(event.reason or event.event), at_ms=event.timestamp * 1000,
            received_ms=received_ms,
        )  # fmt: skip
        return self.item(item, SUPPRESSION_OF.get(kind, ""), Channel.EMAIL, event.email)


class _Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    message_id: str
    feedback: str
    detail: str = ""
    address: str = ""
    channel: str = ""


_events_or_one = msgspec.json.Decoder(_Event | list[_Event])
_CHANNEL_NAMES: Final = frozenset(channel.value for channel in Channel)


class StandardWebhook(_Addresses):
    """Callbacks signed as Standard Webhooks sign, each holding one event or an array of
    them (a forwarder may batch)."""

    signs_url: Final = False

    def __init__(self, provider: str, secret: str, digest: AddressDigest) -> None:
        super().__init__(digest)
        self.provider = provider
        self._key = signing_key(secret)

    def read(self, callback: Callback) -> Taken:
        headers = callback.headers
        webhook_id = headers.get("webhook-id", "")
        timestamp = headers.get("webhook-timestamp", "")
        if not webhook_id or len(webhook_id) > 256 or not timestamp.isdigit():
            raise Refused(401, "webhook-id and webhook-timestamp are required")
        signed = b"%s.%s.%s" % (webhook_id.encode(), timestamp.encode(), callback.body)
        expected = base64.b64encode(hmac.digest(self._key, signed, "sha256")).decode()
        offered = [part.partition(",")[2] for part in headers.get("webhook-signature", "").split()]
        if not any(hmac.compare_digest(sig, expected) for sig in offered if sig):
            raise Refused(401, "webhook-signature: none is the callback's signature")
        at_ms = _fresh(timestamp, callback.received_ms)
        try:
            decoded = _events_or_one.decode(callback.body)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            raise Refused(400, f"body: {error}") from None
        if isinstance(decoded, _Event):
            items = [self._item(decoded, webhook_id, at_ms, callback.received_ms)]
        elif len(decoded) > MAX_EVENTS:
            raise Refused(413, f"body: at most {MAX_EVENTS} events in one callback")
        else:
            items = [
                self._item(event, f"{webhook_id}:{n}", at_ms, callback.received_ms)
                for n, event in enumerate(decoded)
            ]
        return Taken(webhook_id, 2 * MAX_AGE_S * 1000, items)

    def _item(self, event: _Event, feedback_id: str, at_ms: int, received_ms: int) -> Feedback:
        if event.feedback not in _KINDS or not event.message_id:
            raise Refused(400, f"feedback: one of {', '.join(sorted(_KINDS))}")
        item = Feedback(
            provider=self.provider, feedback_id=feedback_id, message_id=event.message_id,
            kind=event.feedback, detail=_detail(event.detail), at_ms=at_ms,  # type: ignore[arg-type]
            received_ms=received_ms,
        )  # fmt: skip
        channel = event.channel if event.channel in _CHANNEL_NAMES else ""
        return self.item(item, SUPPRESSION_OF.get(event.feedback, ""), channel, event.address)


Scheme = TwilioStatus | SendgridEvents | StandardWebhook


def schemes(
    catalog: Catalog, secrets: Mapping[str, Mapping[str, str]], digest: AddressDigest
) -> dict[str, Scheme]:
    """The callback scheme of each provider that takes feedback, by its name."""
    found: dict[str, Scheme] = {}
    for name, config in catalog.providers.items():
        own: Mapping[str, Any] = secrets.get(name, {})
        if isinstance(config, TwilioConfig):
            found[name] = TwilioStatus(name, own["auth_token_env"], digest)
        elif isinstance(config, SendgridConfig) and config.event_webhook_public_key:
            key = event_webhook_key(config.event_webhook_public_key)
            found[name] = SendgridEvents(name, key, digest)
        elif config.feedback_secret_env:
            found[name] = StandardWebhook(name, own["feedback_secret_env"], digest)
    return found


def now_ms() -> int:
    return time.time_ns() // 1_000_000
