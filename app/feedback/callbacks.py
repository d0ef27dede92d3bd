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
its replay is refused for twice ``MAX_AGE_S`` after (a day for Twilio). The replay is known by
what was signed, never by how the signature is written: an ECDSA signature (r, s) has a twin
(r, n - s) that verifies the same body, and base64 has more than one spelling of some bytes.
Texts a provider sends back are masked like any log text and cut short.

Headers are checked before they are used (``requests``: missing, too long or not ASCII is
``Unauthenticated``, naming the header) and signatures compared as bytes. A body is read
only up to its scheme's ``max_bytes`` (the catalog's ``feedback_max_bytes``, else the
scheme's default): Twilio's status callbacks are a few form fields, SendGrid's event batches
can be large.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
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
from app.feedback.requests import Callback, header, signed_time, within
from app.logging import mask
from app.recipients.addresses import masked
from streams.core.errors import Malformed, TooLarge, Unauthenticated
from streams.core.vocabulary import Channel
from streams.feedback.store import Feedback, FeedbackKind
from streams.recipients.settings import AddressDigest

MAX_AGE_S: Final = 300
# The largest body each scheme reads, unless the catalog's ``feedback_max_bytes`` says other.
# Twilio's status callbacks hold a subset of its standard request fields (the largest, a
# Body of up to 1600 characters, is under 20 KB percent-encoded) plus MessageStatus and
# ErrorCode; SendGrid's batches hold up to some thousands of events; a Standard Webhooks
# callback holds one event or a forwarder's batch.
TWILIO_MAX_BYTES: Final = 32 * 1024
SENDGRID_MAX_BYTES: Final = 4 * 1024 * 1024
STANDARD_WEBHOOKS_MAX_BYTES: Final = 1024 * 1024
MAX_WEBHOOK_ID_CHARS: Final = 256
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

    def item(
        self, base: Feedback, suppress: str, channel: Channel | None, address: str
    ) -> Feedback:
        if not suppress or not address or not channel:
            return base
        return msgspec.structs.replace(
            base, suppress=suppress, channel=channel, address_digest=self.digest(address),
            display=masked(channel, address),
        )  # fmt: skip


def _fresh(timestamp: bytes, now_ms: int) -> int:
    """The signed time (checked by ``signed_time``) in ms; ``Malformed`` when it is stale."""
    at_ms = int(timestamp) * 1000
    if abs(now_ms - at_ms) > MAX_AGE_S * 1000:
        raise Malformed(f"timestamp: more than {MAX_AGE_S} s away from now (stale)")
    return at_ms


class TwilioStatus(_Addresses):
    """Twilio's status callbacks."""

    signs_url: Final = True  # the signature covers the URL Twilio called

    def __init__(
        self, provider: str, auth_token: str, digest: AddressDigest,
        max_bytes: int = TWILIO_MAX_BYTES,
    ) -> None:  # fmt: skip
        super().__init__(digest)
        self.provider = provider
        self.max_bytes = max_bytes
        self._token = auth_token.encode()

    def read(self, callback: Callback) -> Taken:
        given = header(callback, "X-Twilio-Signature")
        within(callback, self.max_bytes)
        fields = parse_qsl(callback.body.decode("utf-8", "replace"), keep_blank_values=True)
        signed = callback.url + "".join(name + value for name, value in sorted(fields))
        expected = base64.b64encode(hmac.digest(self._token, signed.encode(), "sha1"))
        if not hmac.compare_digest(given, expected):
            raise Unauthenticated("X-Twilio-Signature: not the callback's signature")
        values = dict(fields)
        sid, status = values.get("MessageSid", ""), values.get("MessageStatus", "")
        if not sid or not status:
            raise Malformed("MessageSid and MessageStatus are required")
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
_SIGNATURE: Final = "X-Twilio-Email-Event-Webhook-Signature"
_SENDGRID_KINDS: Final[dict[str, FeedbackKind]] = {
    "delivered": "delivered", "dropped": "undelivered", "spamreport": "complained",
    "unsubscribe": "unsubscribed", "group_unsubscribe": "unsubscribed",
}  # fmt: skip


class SendgridEvents(_Addresses):
    """SendGrid's signed Event Webhook."""

    signs_url: Final = False

    def __init__(
        self, provider: str, public_key: ec.EllipticCurvePublicKey, digest: AddressDigest,
        max_bytes: int = SENDGRID_MAX_BYTES,
    ) -> None:  # fmt: skip
        super().__init__(digest)
        self.provider = provider
        self.max_bytes = max_bytes
        self._key = public_key

    def read(self, callback: Callback) -> Taken:
        signature = header(callback, _SIGNATURE)
        timestamp = signed_time(callback, "X-Twilio-Email-Event-Webhook-Timestamp")
        within(callback, self.max_bytes)
        signed = timestamp + callback.body
        try:
            der = base64.b64decode(signature, validate=True)
        except binascii.Error:
            raise Unauthenticated(f"{_SIGNATURE}: not base64") from None
        try:
            self._key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
        except (ValueError, InvalidSignature):
            raise Unauthenticated(f"{_SIGNATURE}: not the body's signature") from None
        _fresh(timestamp, callback.received_ms)
        try:
            events = _events.decode(callback.body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise Malformed("body: a JSON array of SendGrid events is required") from None
        if len(events) > MAX_EVENTS:
            raise TooLarge(f"body: at most {MAX_EVENTS} events in one callback")
        items = [self._item(event, callback.received_ms) for event in events]
        # What was signed, not the signature: its malleable twin is the same batch.
        replay = hashlib.sha256(signed).hexdigest()[:32]
        return Taken(replay, 2 * MAX_AGE_S * 1000, [item for item in items if item])

    def _item(self, event: _SendgridEvent, received_ms: int) -> Feedback | None:
        kind = _SENDGRID_KINDS.get(event.event)
        if event.event == "bounce":
            kind = "undelivered" if event.type == "blocked" else "bounced"
        if kind is None or not event.sg_message_id or not event.sg_event_id:
            return None
        # An event's own time, unless no clock could have read it (before 1970, or after the
        # batch was signed): then when it came, so the event it becomes has a date.
        at_ms = event.timestamp * 1000
        at_ms = at_ms if 0 < at_ms <= received_ms + MAX_AGE_S * 1000 else received_ms
        item = Feedback(
            provider=self.provider, feedback_id=event.sg_event_id,
            message_id=event.sg_message_id.split(".", 1)[0], kind=kind,
            detail=_detail(event.reason or event.event), at_ms=at_ms, received_ms=received_ms,
        )  # fmt: skip
        return self.item(item, SUPPRESSION_OF.get(kind, ""), Channel.EMAIL, event.email)


class _Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    message_id: str
    feedback: str
    detail: str = ""
    address: str = ""
    channel: str = ""


_events_or_one = msgspec.json.Decoder(_Event | list[_Event])
_VISIBLE: Final = re.compile(rb"[\x21-\x7e]+")  # a webhook-id's characters
_CHANNEL_NAMES: Final = frozenset(channel.value for channel in Channel)


class StandardWebhook(_Addresses):
    """Callbacks signed as Standard Webhooks sign, each holding one event or an array of
    them (a forwarder may batch)."""

    signs_url: Final = False

    def __init__(
        self, provider: str, secret: str, digest: AddressDigest,
        max_bytes: int = STANDARD_WEBHOOKS_MAX_BYTES,
    ) -> None:  # fmt: skip
        super().__init__(digest)
        self.provider = provider
        self.max_bytes = max_bytes
        self._key = signing_key(secret)

    def read(self, callback: Callback) -> Taken:
        webhook_id = header(callback, "webhook-id", MAX_WEBHOOK_ID_CHARS)
        if not _VISIBLE.fullmatch(webhook_id):
            raise Unauthenticated("webhook-id: only visible ASCII characters, no spaces")
        timestamp = signed_time(callback, "webhook-timestamp")
        # Space-separated ``<version>,<base64>``; ``v1`` is HMAC-SHA256, other versions
        # (asymmetric ones) are not this scheme's and are passed over.
        parts = header(callback, "webhook-signature").split()
        offered = [
            sig for version, _, sig in (p.partition(b",") for p in parts) if version == b"v1"
        ]
        if not any(offered):
            raise Unauthenticated("webhook-signature: no v1 signature (v1,<base64>)")
        within(callback, self.max_bytes)
        signed = b"%s.%s.%s" % (webhook_id, timestamp, callback.body)
        expected = base64.b64encode(hmac.digest(self._key, signed, "sha256"))
        if not any(hmac.compare_digest(signature, expected) for signature in offered):
            raise Unauthenticated("webhook-signature: none is the callback's signature")
        at_ms = _fresh(timestamp, callback.received_ms)
        webhook_id_text = webhook_id.decode("ascii")
        try:
            decoded = _events_or_one.decode(callback.body)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            raise Malformed(f"body: {error}") from None
        if isinstance(decoded, _Event):
            items = [self._item(decoded, webhook_id_text, at_ms, callback.received_ms)]
        elif len(decoded) > MAX_EVENTS:
            raise TooLarge(f"body: at most {MAX_EVENTS} events in one callback")
        else:
            items = [
                self._item(event, f"{webhook_id_text}:{n}", at_ms, callback.received_ms)
                for n, event in enumerate(decoded)
            ]
        # The webhook-id is signed and stays the same across the sender's retries.
        return Taken(webhook_id_text, 2 * MAX_AGE_S * 1000, items)

    def _item(self, event: _Event, feedback_id: str, at_ms: int, received_ms: int) -> Feedback:
        if event.feedback not in _KINDS or not event.message_id:
            raise Malformed(f"feedback: one of {', '.join(sorted(_KINDS))}")
        item = Feedback(
            provider=self.provider, feedback_id=feedback_id, message_id=event.message_id,
            kind=event.feedback, detail=_detail(event.detail), at_ms=at_ms,  # type: ignore[arg-type]
            received_ms=received_ms,
        )  # fmt: skip
        channel = Channel(event.channel) if event.channel in _CHANNEL_NAMES else None
        return self.item(item, SUPPRESSION_OF.get(event.feedback, ""), channel, event.address)


Scheme = TwilioStatus | SendgridEvents | StandardWebhook


def schemes(
    catalog: Catalog, secrets: Mapping[str, Mapping[str, str]], digest: AddressDigest
) -> dict[str, Scheme]:
    """The callback scheme of each provider that takes feedback, by its name."""
    found: dict[str, Scheme] = {}
    for name, config in catalog.providers.items():
        own: Mapping[str, Any] = secrets.get(name, {})
        bound = config.feedback_max_bytes
        if isinstance(config, TwilioConfig):
            token = own["auth_token_env"]
            found[name] = TwilioStatus(name, token, digest, bound or TWILIO_MAX_BYTES)
        elif isinstance(config, SendgridConfig) and config.event_webhook_public_key:
            key = event_webhook_key(config.event_webhook_public_key)
            found[name] = SendgridEvents(name, key, digest, bound or SENDGRID_MAX_BYTES)
        elif config.feedback_secret_env:
            secret, bound = own["feedback_secret_env"], bound or STANDARD_WEBHOOKS_MAX_BYTES
            found[name] = StandardWebhook(name, secret, digest, bound)
    return found
