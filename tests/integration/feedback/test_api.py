"""``POST /v1/feedback/{provider}`` over HTTP: a Twilio status callback and a SendGrid event batch
signed as their providers sign are taken into the inbox (200, how many items); an unknown
provider is 404, a wrong signature 401, a stale batch 400, a replay 409 (also under the
malleable twin of a SendGrid signature), a body over its provider's bound 413; a signature
header that is not ASCII 401 naming it; taking one needs no API key."""

from __future__ import annotations

import base64
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import parse_catalog
from app.feedback.api import MAX_CALLBACK_BYTES
from app.feedback.callbacks import TWILIO_MAX_BYTES
from app.settings import Settings
from streams.core.keys import KeySpace
from streams.feedback.store import decode
from tests.conftest import REPO, http_client

TOKEN = "twilio-auth-token-0123456789abcdef"
SENDGRID = ec.generate_private_key(ec.SECP256R1())
PUBLIC = base64.b64encode(
    SENDGRID.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()
PROVIDERS = f"""
[providers.sms]
kind = "twilio"
account_sid = "AC{"0" * 32}"
auth_token_env = "TWILIO_TOKEN"
from = "+15005550006"

[providers.mail]
kind = "sendgrid"
api_key_env = "SENDGRID_KEY"
from = "no-reply@example.com"
event_webhook_public_key = "{PUBLIC}"
"""


@pytest.fixture
async def api(redis: Redis, settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    text = (
        (REPO / "clarion.toml")
        .read_text()
        .replace("[channels.PUSH]", PROVIDERS + "\n[channels.PUSH]", 1)
    )
    catalog = parse_catalog(text, "feedback.toml")
    app = create_app(settings, redis=redis, catalog=catalog, environ={"TWILIO_TOKEN": TOKEN})
    async with http_client(app) as client:
        yield client


def twilio(fields: dict[str, str], token: str = TOKEN) -> dict[str, object]:
    url = "http://clarion/v1/feedback/sms"  # the URL the test client calls
    signed = url + "".join(name + value for name, value in sorted(fields.items()))
    signature = base64.b64encode(hmac.digest(token.encode(), signed.encode(), "sha1")).decode()
    headers = {"X-Twilio-Signature": signature,
               "Content-Type": "application/x-www-form-urlencoded"}  # fmt: skip
    return {"content": urlencode(fields).encode(), "headers": headers}


def sendgrid(events: list[dict[str, object]], age_s: int = 0) -> dict[str, object]:
    body = json.dumps(events).encode()
    timestamp = str(int(time.time()) - age_s)
    signature = SENDGRID.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    headers = {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
               "X-Twilio-Email-Event-Webhook-Timestamp": timestamp}  # fmt: skip
    return {"content": body, "headers": headers}


async def inbox(redis: Redis, prefix: str) -> list[str]:
    entries = await redis.xrange(KeySpace(prefix).feedback_inbox)
    return [decode(fields[b"f"]).kind for _, fields in entries]


async def test_signed_callbacks_are_taken_and_replays_refused(
    api: httpx.AsyncClient, redis: Redis, key_prefix: str
) -> None:
    status = {"MessageSid": "SM1", "MessageStatus": "delivered", "To": "+4915112345678"}
    taken = await api.post("/v1/feedback/sms", **twilio(status))  # type: ignore[arg-type]
    assert (taken.status_code, taken.json()) == (200, {"received": 1})
    replay = await api.post("/v1/feedback/sms", **twilio(status))  # type: ignore[arg-type]
    assert replay.status_code == 409
    events = [{"event": "spamreport", "sg_event_id": "e1", "sg_message_id": "m1.x",
               "email": "anna@example.com", "timestamp": int(time.time())},
              {"event": "open", "sg_event_id": "e2", "sg_message_id": "m1.x"}]  # fmt: skip
    batch = sendgrid(events)
    assert (await api.post("/v1/feedback/mail", **batch)).json() == {"received": 1}  # type: ignore[arg-type]
    assert (await api.post("/v1/feedback/mail", **batch)).status_code == 409  # type: ignore[arg-type]
    assert await inbox(redis, key_prefix) == ["delivered", "complained"]


async def test_wrong_unknown_stale_and_oversized_callbacks_are_refused(
    api: httpx.AsyncClient, redis: Redis, key_prefix: str
) -> None:
    status = {"MessageSid": "SM1", "MessageStatus": "delivered"}
    forged = await api.post("/v1/feedback/sms", **twilio(status, token="guessed"))  # type: ignore[arg-type]
    assert (forged.status_code, "X-Twilio-Signature" in forged.json()["detail"]) == (401, True)
    stale = await api.post("/v1/feedback/mail", **sendgrid([], age_s=600))  # type: ignore[arg-type]
    assert (stale.status_code, "stale" in stale.json()["detail"]) == (400, True)
    unknown = await api.post("/v1/feedback/sandbox", content=b"{}")
    assert unknown.status_code == 404  # the sandbox takes no feedback without a secret
    huge = await api.post("/v1/feedback/mail", content=b"[" + b" " * MAX_CALLBACK_BYTES + b"]")
    assert huge.status_code == 413
    assert await inbox(redis, key_prefix) == []


# The order of P-256's base point: (r, s) and (r, n - s) are both valid ECDSA signatures.
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
SIGNATURE = "X-Twilio-Email-Event-Webhook-Signature"


async def test_a_sendgrid_batch_sent_again_under_the_twin_signature_is_a_replay(
    api: httpx.AsyncClient, redis: Redis, key_prefix: str
) -> None:
    events = [{"event": "spamreport", "sg_event_id": "e1", "sg_message_id": "m1.x",
               "email": "anna@example.com", "timestamp": int(time.time())}]  # fmt: skip
    batch: dict[str, Any] = sendgrid(events)
    taken = await api.post("/v1/feedback/mail", **batch)
    assert (taken.status_code, taken.json()) == (200, {"received": 1})
    # Anyone who saw the batch can make the twin (r, n - s) without the key: it verifies.
    r, s = decode_dss_signature(base64.b64decode(batch["headers"][SIGNATURE]))
    twin = base64.b64encode(encode_dss_signature(r, P256_ORDER - s)).decode()
    again = await api.post("/v1/feedback/mail", content=batch["content"],
                           headers={**batch["headers"], SIGNATURE: twin})  # fmt: skip
    assert (again.status_code, again.json()["detail"]) == (
        409,
        "callback: already received (a replay)",
    )
    assert await inbox(redis, key_prefix) == ["complained"]  # the complaint once


async def test_a_twilio_callback_over_its_bound_is_refused(
    api: httpx.AsyncClient, redis: Redis, key_prefix: str
) -> None:
    status = {"MessageSid": "SM1", "MessageStatus": "delivered", "Body": "x" * TWILIO_MAX_BYTES}
    huge = await api.post("/v1/feedback/sms", **twilio(status))  # type: ignore[arg-type]
    assert (huge.status_code, huge.json()["detail"]) == (
        413, f"body: larger than {TWILIO_MAX_BYTES} bytes, this provider's bound",
    )  # fmt: skip
    assert await inbox(redis, key_prefix) == []


async def test_signature_headers_that_are_not_ascii_are_refused_naming_them(
    api: httpx.AsyncClient, redis: Redis, key_prefix: str
) -> None:
    status = twilio({"MessageSid": "SM1", "MessageStatus": "delivered"})
    latin = await api.post("/v1/feedback/sms", content=status["content"],  # type: ignore[arg-type]
                           headers={b"X-Twilio-Signature": b"\xe9abc"})  # fmt: skip
    assert (latin.status_code, latin.json()["detail"]) == (401, "X-Twilio-Signature: not ASCII")
    batch: dict[str, Any] = sendgrid([])
    timestamp = batch["headers"]["X-Twilio-Email-Event-Webhook-Timestamp"].encode()
    superscript = await api.post("/v1/feedback/mail", content=batch["content"], headers={
        SIGNATURE.encode(): batch["headers"][SIGNATURE].encode(),
        b"X-Twilio-Email-Event-Webhook-Timestamp": timestamp[:-1] + b"\xb2",
    })  # fmt: skip
    assert superscript.status_code == 401
    assert await inbox(redis, key_prefix) == []
