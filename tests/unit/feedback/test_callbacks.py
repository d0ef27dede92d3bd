"""Each provider's callback scheme: a callback signed as the provider signs is taken, with the
items its provider's words stand for; a missing or wrong signature, a tampered body, a stale
time and a body that is not the scheme's are refused with their status, naming what is
wrong; addresses become digests and masked forms, texts are masked."""

from __future__ import annotations

import base64
import hmac
import json
import time
from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from standardwebhooks import Webhook

from app.api.errors import status_of
from app.catalog import parse_catalog
from app.feedback.callbacks import (
    MAX_AGE_S,
    MAX_EVENTS,
    STANDARD_WEBHOOKS_MAX_BYTES,
    TWILIO_MAX_BYTES,
    SendgridEvents,
    StandardWebhook,
    TwilioStatus,
    schemes,
)
from app.feedback.requests import Callback
from streams.core.errors import ClarionError
from tests.conftest import DIGEST, REPO

URL = "https://notify.example.com/v1/feedback/sms"
TOKEN = "twilio-auth-token-0123456789abcdef"
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
SENDGRID_KEY = ec.generate_private_key(ec.SECP256R1())
SENDGRID_PUBLIC = base64.b64encode(
    SENDGRID_KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()


def now_ms() -> int:
    return int(time.time() * 1000)


def twilio(fields: dict[str, str], token: str = TOKEN, url: str = URL) -> Callback:
    signed = url + "".join(name + value for name, value in sorted(fields.items()))
    signature = base64.b64encode(hmac.digest(token.encode(), signed.encode(), "sha1")).decode()
    return Callback(URL, {"x-twilio-signature": signature}, urlencode(fields).encode(), now_ms())


def refusal(scheme: object, callback: Callback) -> tuple[int, str]:
    with pytest.raises(ClarionError) as caught:
        scheme.read(callback)  # type: ignore[attr-defined]
    # The status the API answers it with (``app.api.errors``).
    status = status_of(caught.value)
    assert status is not None
    return status, caught.value.detail


STATUS = {"MessageSid": "SM1", "MessageStatus": "delivered", "To": "+4915112345678",
          "AccountSid": "AC1"}  # fmt: skip


def test_a_twilio_status_callback_is_taken_as_its_status_says() -> None:
    scheme = TwilioStatus("sms", TOKEN, DIGEST)
    taken = scheme.read(twilio(STATUS))
    [item] = taken.items
    assert (item.kind, item.message_id, item.suppress, taken.replay_key) == (
        "delivered", "SM1", "", "SM1:delivered:",
    )  # fmt: skip
    stopped = scheme.read(twilio({**STATUS, "MessageStatus": "failed", "ErrorCode": "21610"}))
    [item] = stopped.items
    assert (item.kind, item.suppress, item.channel) == ("undelivered", "stop", "SMS")
    assert (item.address_digest, item.display) == (DIGEST("+4915112345678"), "+49***78")
    dead = scheme.read(twilio({**STATUS, "MessageStatus": "undelivered", "ErrorCode": "30005"}))
    assert dead.items[0].suppress == "invalid_address"
    assert dead.items[0].detail == "Twilio undelivered (error 30005)"
    # A status nobody acts on is taken, with nothing in it.
    assert scheme.read(twilio({**STATUS, "MessageStatus": "sent"})).items == []


def test_a_twilio_callback_not_signed_with_the_token_or_changed_is_refused() -> None:
    scheme = TwilioStatus("sms", TOKEN, DIGEST)
    assert refusal(scheme, twilio(STATUS, token="another-token"))[0] == 401
    assert refusal(scheme, twilio(STATUS, url="https://evil.example/x"))[0] == 401
    signed = twilio(STATUS)
    tampered = Callback(signed.url, signed.headers, signed.body.replace(b"SM1", b"SM2"), 1)
    assert refusal(scheme, tampered)[0] == 401
    unsigned = Callback(URL, {}, signed.body, 1)
    assert refusal(scheme, unsigned) == (401, "X-Twilio-Signature: missing")
    assert refusal(scheme, twilio({"MessageStatus": "delivered"}))[0] == 400


def sendgrid(
    events: list[dict[str, object]], age_s: int = 0, key: ec.EllipticCurvePrivateKey = SENDGRID_KEY
) -> Callback:
    body = json.dumps(events).encode()
    timestamp = str(int(time.time()) - age_s)
    signature = key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    headers = {
        "x-twilio-email-event-webhook-signature": base64.b64encode(signature).decode(),
        "x-twilio-email-event-webhook-timestamp": timestamp,
    }
    return Callback(URL, headers, body, now_ms())


def event(kind: str, n: int, **extra: object) -> dict[str, object]:
    return {"event": kind, "sg_event_id": f"ev-{n}", "sg_message_id": f"msg{n}.filter0001.x",
            "email": "anna@example.com", "timestamp": 1_700_000_000, **extra}  # fmt: skip


def test_sendgrid_events_are_taken_as_their_kinds_say() -> None:
    scheme = SendgridEvents("mail", SENDGRID_KEY.public_key(), DIGEST)
    events = [
        event("delivered", 1),
        event("bounce", 2, type="bounce", reason="550 5.1.1 <anna@example.com> unknown"),
        event("bounce", 3, type="blocked"), event("spamreport", 4), event("unsubscribe", 5),
        event("open", 6), event("processed", 7), event("dropped", 8, reason="Bounced Address"),
    ]  # fmt: skip
    taken = scheme.read(sendgrid(events))
    kinds = [(i.feedback_id, i.message_id, i.kind, i.suppress) for i in taken.items]
    assert kinds == [
        ("ev-1", "msg1", "delivered", ""), ("ev-2", "msg2", "bounced", "hard_bounce"),
        ("ev-3", "msg3", "undelivered", ""), ("ev-4", "msg4", "complained", "complaint"),
        ("ev-5", "msg5", "unsubscribed", "unsubscribed"), ("ev-8", "msg8", "undelivered", ""),
    ]  # fmt: skip
    bounce = taken.items[1]
    assert bounce.detail == "550 5.1.1 <<email>> unknown"  # masked
    assert (bounce.at_ms, bounce.display) == (1_700_000_000_000, "a***@example.com")


def test_a_sendgrid_batch_not_signed_by_the_key_stale_or_broken_is_refused() -> None:
    scheme = SendgridEvents("mail", SENDGRID_KEY.public_key(), DIGEST)
    other = ec.generate_private_key(ec.SECP256R1())
    assert refusal(scheme, sendgrid([event("delivered", 1)], key=other))[0] == 401
    good = sendgrid([event("delivered", 1)])
    tampered = Callback(URL, good.headers, good.body.replace(b"delivered", b"spamreport"), 1)
    assert refusal(scheme, tampered)[0] == 401
    status, detail = refusal(scheme, sendgrid([event("delivered", 1)], age_s=MAX_AGE_S + 5))
    assert (status, "stale" in detail) == (400, True)
    assert refusal(scheme, sendgrid({"not": "a list"}))[0] == 400


def standard(payload: object, *, age_s: int = 0, secret: str = SECRET,
             webhook_id: str = "msg_1") -> Callback:  # fmt: skip
    body = json.dumps(payload).encode()
    timestamp = int(time.time()) - age_s

    signature = Webhook(secret).sign(
        webhook_id, datetime.fromtimestamp(timestamp, UTC), body.decode()
    )
    headers = {"webhook-id": webhook_id, "webhook-timestamp": str(timestamp),
               "webhook-signature": signature}  # fmt: skip
    return Callback(URL, headers, body, now_ms())


def test_a_standard_webhook_is_verified_as_the_library_signs_it() -> None:
    scheme = StandardWebhook("relay", SECRET, DIGEST)
    bounce = {"message_id": "m-1", "feedback": "bounced", "detail": "no such user",
              "address": "anna@example.com", "channel": "EMAIL"}  # fmt: skip
    taken = scheme.read(standard(bounce))
    [item] = taken.items
    assert (item.kind, item.message_id, item.suppress, item.channel, taken.replay_key) == (
        "bounced", "m-1", "hard_bounce", "EMAIL", "msg_1",
    )  # fmt: skip
    assert item.address_digest == DIGEST("anna@example.com")
    other = "whsec_" + base64.b64encode(b"o" * 32).decode()
    assert refusal(scheme, standard(bounce, secret=other))[0] == 401
    assert refusal(scheme, standard(bounce, age_s=MAX_AGE_S + 10))[0] == 400
    assert refusal(scheme, standard({**bounce, "feedback": "lost"}))[0] == 400
    assert refusal(scheme, standard({**bounce, "colour": "red"}))[0] == 400
    no_id = Callback(URL, {"webhook-timestamp": "1"}, b"{}", 1)
    assert refusal(scheme, no_id)[0] == 401
    # Without an address a bounce changes the delivery but suppresses nothing.
    plain = scheme.read(standard({"message_id": "m-2", "feedback": "bounced"}, webhook_id="w2"))
    assert plain.items[0].address_digest == ""


def test_the_replay_keys_of_two_sendgrid_batches_differ() -> None:
    scheme = SendgridEvents("mail", SENDGRID_KEY.public_key(), DIGEST)
    first = scheme.read(sendgrid([event("delivered", 1)]))
    second = scheme.read(sendgrid([event("delivered", 2)]))
    assert first.replay_key != second.replay_key
    # A digest of the signature, never the signature itself.
    signature = sendgrid([event("delivered", 1)]).headers["x-twilio-email-event-webhook-signature"]
    assert signature not in (first.replay_key, second.replay_key)
    assert len(first.replay_key) == 32


def test_a_standard_webhook_may_carry_an_array_of_events_each_known_by_its_index() -> None:
    scheme = StandardWebhook("relay", SECRET, DIGEST)
    events = [{"message_id": "m-1", "feedback": "delivered"},
              {"message_id": "m-2", "feedback": "complained", "address": "anna@example.com",
               "channel": "EMAIL"}]  # fmt: skip
    taken = scheme.read(standard(events, webhook_id="batch-7"))
    assert taken.replay_key == "batch-7"
    assert [(i.feedback_id, i.message_id, i.kind, i.suppress) for i in taken.items] == [
        ("batch-7:0", "m-1", "delivered", ""),
        ("batch-7:1", "m-2", "complained", "complaint"),
    ]
    # One bad event refuses the whole callback: the provider sends it again, fixed.
    bad = [*events, {"message_id": "m-3", "feedback": "lost"}]
    assert refusal(scheme, standard(bad))[0] == 400
    too_many = [{"message_id": "m", "feedback": "delivered"}] * (MAX_EVENTS + 1)
    assert refusal(scheme, standard(too_many))[0] == 413


# The order of P-256's base point: (r, s) and (r, n - s) are both valid ECDSA signatures.
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def twin(signed: Callback) -> Callback:
    """The same SendGrid batch under the malleable twin of its signature, as anyone who saw
    the batch can make it without the private key."""
    name = "x-twilio-email-event-webhook-signature"
    r, s = decode_dss_signature(base64.b64decode(signed.headers[name]))
    twin_signature = base64.b64encode(encode_dss_signature(r, P256_ORDER - s)).decode()
    return Callback(signed.url, {**signed.headers, name: twin_signature}, signed.body, now_ms())


def test_the_twin_of_a_sendgrid_signature_is_the_same_batch_to_the_replay_guard() -> None:
    scheme = SendgridEvents("mail", SENDGRID_KEY.public_key(), DIGEST)
    signed = sendgrid([event("spamreport", 1)])
    again = twin(signed)
    assert again.headers != signed.headers
    # The twin verifies (the key alone cannot tell them apart) and is known as the same batch.
    assert scheme.read(again).replay_key == scheme.read(signed).replay_key


def with_headers(callback: Callback, **headers: str) -> Callback:
    """``callback`` with headers replaced (``None``-like "" removes one), names as ASGI gives."""
    merged = {**callback.headers, **{k.replace("_", "-"): v for k, v in headers.items()}}
    return Callback(callback.url, {k: v for k, v in merged.items() if v}, callback.body, 1)


# Header values as a client can send them (ASGI gives them as Latin-1 text).
HOSTILE_SIGNATURES = ["\xe9abc", "v1,\xe9x", "\xff\xfe", "a" * 5000, "!!!!", "=", " ", "v1,"]
HOSTILE_TIMES = ["\xe9", "\xb9\xb2\xb3", "\xb2", "-1", "1e9", "1" * 13, " 17", "0x10", "\x00"]


@pytest.mark.parametrize("value", HOSTILE_SIGNATURES)
def test_a_hostile_twilio_signature_is_refused_naming_the_header(value: str) -> None:
    scheme = TwilioStatus("sms", TOKEN, DIGEST)
    status, detail = refusal(scheme, with_headers(twilio(STATUS), x_twilio_signature=value))
    assert (status, detail.startswith("X-Twilio-Signature: ")) == (401, True)


@pytest.mark.parametrize(
    ("name", "value"),
    [("x_twilio_email_event_webhook_signature", value) for value in HOSTILE_SIGNATURES]
    + [("x_twilio_email_event_webhook_timestamp", value) for value in HOSTILE_TIMES],
)
def test_a_hostile_sendgrid_header_is_refused_naming_it(name: str, value: str) -> None:
    scheme = SendgridEvents("mail", SENDGRID_KEY.public_key(), DIGEST)
    status, detail = refusal(
        scheme, with_headers(sendgrid([event("delivered", 1)]), **{name: value})
    )
    assert (status, detail.lower().startswith(name.replace("_", "-") + ":")) == (401, True)


@pytest.mark.parametrize(
    ("name", "value"),
    [("webhook_signature", value) for value in [*HOSTILE_SIGNATURES, "v1a,abc", ",,, v2,x"]]
    + [("webhook_timestamp", value) for value in HOSTILE_TIMES]
    + [("webhook_id", value) for value in ["\xe9", "a b", "\x7f", "m" * 257, "\t"]],
)
def test_a_hostile_standard_webhooks_header_is_refused_naming_it(name: str, value: str) -> None:
    scheme = StandardWebhook("relay", SECRET, DIGEST)
    signed = standard({"message_id": "m-1", "feedback": "delivered"})
    status, detail = refusal(scheme, with_headers(signed, **{name: value}))
    assert (status, detail.startswith(name.replace("_", "-") + ":")) == (401, True)


def test_a_body_over_its_scheme_bound_is_refused_before_it_is_parsed() -> None:
    schemes = [TwilioStatus("sms", TOKEN, DIGEST, max_bytes=1024),
               SendgridEvents("mail", SENDGRID_KEY.public_key(), DIGEST, max_bytes=1024),
               StandardWebhook("relay", SECRET, DIGEST, max_bytes=1024)]  # fmt: skip
    callbacks = [twilio({**STATUS, "Body": "x" * 1024}),
                 sendgrid([event("delivered", n) for n in range(20)]),
                 standard([{"message_id": "m", "feedback": "delivered"}] * 40)]  # fmt: skip
    for scheme, callback in zip(schemes, callbacks, strict=True):
        assert refusal(scheme, callback) == (
            413,
            "body: larger than 1024 bytes, this provider's bound",
        )


def test_each_scheme_has_its_body_bound_unless_the_catalog_gives_one() -> None:
    providers = f"""
[providers.sms]
kind = "twilio"
account_sid = "AC{"0" * 32}"
auth_token_env = "TWILIO_TOKEN"
from = "+15005550006"

[providers.mail]
kind = "sendgrid"
api_key_env = "SENDGRID_KEY"
from = "no-reply@example.com"
event_webhook_public_key = "{SENDGRID_PUBLIC}"
feedback_max_bytes = 2097152

[providers.relay]
kind = "sandbox"
feedback_secret_env = "RELAY_SECRET"
"""
    text = (
        (REPO / "clarion.toml")
        .read_text()
        .replace("[channels.PUSH]", providers + "\n[channels.PUSH]", 1)
    )
    secrets = {"sms": {"auth_token_env": TOKEN}, "relay": {"feedback_secret_env": SECRET}}
    found = schemes(parse_catalog(text, "x.toml"), secrets, DIGEST)
    assert {name: scheme.max_bytes for name, scheme in found.items()} == {
        "sms": TWILIO_MAX_BYTES, "mail": 2 * 1024 * 1024, "relay": STANDARD_WEBHOOKS_MAX_BYTES,
    }  # fmt: skip


@pytest.mark.parametrize("timestamp", [253_402_300_800, 2**62, -1, 0])
def test_a_sendgrid_event_time_no_clock_could_read_is_when_it_came(timestamp: int) -> None:
    # Its event's date (``datetime.fromtimestamp``) would be past the year 9999 or before 1970.
    scheme = SendgridEvents("mail", SENDGRID_KEY.public_key(), DIGEST)
    signed = sendgrid([event("delivered", 1, timestamp=timestamp)])
    [item] = scheme.read(signed).items
    assert item.at_ms == signed.received_ms
