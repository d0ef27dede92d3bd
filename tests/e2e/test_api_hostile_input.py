"""Hostile input to a running API: bodies nested past what the decoder follows, strings that
are not UTF-8, names that are no time zone, times outside the years 1-9999 in UTC, numbers
past every limit, NaN, duplicate keys, bodies that are no object or nothing at all, wrong
content types, a byte order mark. Each is answered with a 4xx whose JSON ``detail`` says
what is wrong (a batch: 200, with such an answer for each item), never with a 5xx; and the
API logs no traceback meanwhile (``running_api``)."""

from __future__ import annotations

import base64
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from app.unsubscribe import OptOut, UnsubscribeTokens
from streams.core.vocabulary import Channel
from tests.conftest import DIGEST_SECRET, REPO
from tests.e2e.api_service import API_KEY, running_api

AUTH = {"Authorization": f"Bearer {API_KEY}"}
DEEP = b"[" * 1000 + b"]" * 1000  # a 2 KB body nested past the decoder's limit
OTP = b'"recipient": {"id": "u-1", "phone": "+4915112345678"}, "type": "otp"'
ITEM = b'"idempotency_key": "k-1", ' + OTP
QUIET = b'"start": "22:00", "end": "08:00"'
REPLAY = b'"limit": 1, "operator": "fuzz", "reason": "hostile input", "dry_run": true'
RECIPIENT = "/v1/recipients/u-1"
FIRST = "0001-01-01T00:00:00%2B14:00"  # before year 1 in UTC
LAST = "9999-12-31T23:59:59-14:00"  # after year 9999 in UTC
CAMPAIGN = b'"type": "marketing", "data": {"subject": "s", "body": "b"}'
# A campaign that does not exist: an upload's body is read before the campaign is looked up.
UPLOAD = "/v1/campaigns/01900000-0000-7000-8000-000000000000/recipients"


@pytest.fixture(scope="module")
def api() -> Iterator[httpx.Client]:
    with running_api() as url, httpx.Client(base_url=url, timeout=10) as client:
        yield client


def obj(*members: bytes) -> bytes:
    return b"{" + b", ".join(members) + b"}"


# What each endpoint that reads a body gets, the same for all: (name, body, content type).
SHAPES: list[tuple[str, bytes, str]] = [
    ("empty", b"", "application/json"),
    ("whitespace", b" \r\n\t ", "application/json"),
    ("an array", b"[]", "application/json"),
    ("a string", b'"hello"', "application/json"),
    ("null", b"null", "application/json"),
    ("a number", b"1e400", "application/json"),
    ("nested past the limit", DEEP, "application/json"),
    ("nested past the limit, never closed", b"[" * 5000, "application/json"),
    ("invalid UTF-8 outside strings", b"\xff\xfe{}", "application/json"),
    ("a byte order mark", b'\xef\xbb\xbf{"a": 1}', "application/json"),
    ("a form", b"recipient=u-1&type=otp", "application/x-www-form-urlencoded"),
    ("multipart", b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--x--\r\n',
     "multipart/form-data; boundary=x"),
    ("text", b"hello", "text/plain"),
    # What a form of another site's page posts (enctype="text/plain"), shaped like JSON.
    ("JSON as a text/plain form", b'{"limit": 1, "x": "="}\r\n', "text/plain"),
    ("JSON as text", b'{"a": 1}', "text/plain;charset=application/json"),
    ("JSON without a type", b'{"a": 1}', ""),
    ("JSON as a JSON-like type", b'{"a": 1}', "application/json-patch+json"),
    ("NaN", b'{"a": NaN}', "application/json"),
    ("Infinity", b'{"a": -Infinity}', "application/json"),
    ("broken", b'{"a": ', "application/json"),
]  # fmt: skip

# Per endpoint: bodies almost right but for one hostile field.
BODIES: dict[tuple[str, str], list[bytes]] = {
    ("POST", "/v1/notifications"): [
        obj(OTP, b'"data": {"x": %s}' % DEEP),
        obj(b'"recipient": %s, "type": "otp"' % DEEP),
        obj(OTP, b'"data": {"code": "\xff\xfe"}'),
        obj(OTP, b'"data": {"\xc3\x28": 1}'),
        obj(b'"recipient": {"id": "u-\xe2\x82"}, "type": "otp"'),
        obj(OTP, b'"data": {"code": 1e400}'),
        obj(OTP, b'"ttl_seconds": 18446744073709551616'),
        obj(OTP, b'"ttl_seconds": -18446744073709551616'),
        obj(OTP, b'"ttl_seconds": 1e400'),
        obj(OTP, b'"ttl_seconds": NaN'),
        obj(OTP, b'"data": {"code": Infinity}'),
        obj(OTP, b'"type": 7'),  # a duplicate key: the last one counts
        obj(OTP, b'"recipient": "again"'),
        obj(OTP, b'"data": %s' % (b'{"a": ' * 40 + b"1" + b"}" * 40)),  # past data's 32 levels
        obj(OTP, b'"locale": "%s"' % (b"ab-" * 20000)),
        obj(b'"recipient": {"id": "u", "email": "a@%s@"}, "type": "otp"' % (b"." * 20000)),
    ],
    ("PUT", f"{RECIPIENT}/preferences"): [
        obj(b'"preferences": %s' % DEEP),
        obj(b'"preferences": [{"type": %s, "channel": "SMS", "enabled": false}]' % DEEP),
        obj(b'"preferences": [{"type": "\xff", "channel": "SMS", "enabled": false}]'),
        obj(b'"preferences": [], "preferences": 18446744073709551616'),
        obj(b'"preferences": [{"type": "otp", "channel": "SMS", "enabled": NaN}]'),
    ],
    ("PUT", f"{RECIPIENT}/quiet-hours"): [
        obj(QUIET, b'"timezone": %s' % DEEP),
        obj(b'"start": %s, "end": "08:00", "timezone": "UTC"' % DEEP),
        obj(QUIET, b'"timezone": "Europe"'),
        obj(QUIET, b'"timezone": "%s"' % (b"x" * 300)),
        obj(QUIET, b'"timezone": "Europe/../Europe/Berlin"'),
        obj(QUIET, b'"timezone": "../../etc/passwd"'),
        obj(QUIET, b'"timezone": "Europe/Berlin\\u0000"'),
        obj(QUIET, b'"timezone": "/etc/localtime"'),
        obj(QUIET, b'"timezone": "localtime"'),
        obj(QUIET, b'"timezone": "Europe/Berlin/"'),
        obj(QUIET, b'"timezone": "\xff"'),
        obj(QUIET, b'"timezone": "UTC", "timezone": 1e400'),
        obj(b'"start": "%s", "end": "08:00", "timezone": "UTC"' % (b"12:" * 20000)),
    ],
    ("POST", "/v1/dlq/replay"): [
        obj(REPLAY, b'"delivery_ids": %s' % DEEP),
        obj(REPLAY, b'"since": "0001-01-01T00:00:00+14:00"'),
        obj(REPLAY, b'"until": "9999-12-31T23:59:59-14:00"'),
        obj(REPLAY, b'"since": "\xff"'),
        obj(REPLAY, b'"limit": 18446744073709551616'),
        obj(REPLAY, b'"limit": NaN'),
        obj(REPLAY, b'"operator": "%s"' % (b"\\u0000" * 10)),
    ],
    ("POST", "/v1/notifications/batch"): [
        obj(b'"notifications": %s' % DEEP),
        obj(b'"notifications": [%s]' % obj(ITEM, b'"data": {"x": %s}' % DEEP)),
        obj(b'"notifications": [%s]' % obj(ITEM, b'"data": {"code": "\xff"}')),
        obj(b'"notifications": [%s]' % obj(ITEM, b'"ttl_seconds": 1e400')),
        obj(b'"notifications": [%s]' % obj(ITEM, b'"ttl_seconds": NaN')),
        obj(b'"notifications": [1, "x", null, [], %s]' % DEEP),
        obj(b'"notifications": [%s], "notifications": 7' % obj(ITEM)),
    ],
    ("POST", "/v1/campaigns"): [
        obj(CAMPAIGN, b'"segment": %s' % DEEP),
        obj(CAMPAIGN, b'"segment": {"attributes": %s}' % DEEP),
        obj(CAMPAIGN, b'"segment": {"attributes": {}}'),
        obj(CAMPAIGN, b'"segment": {"attributes": {"plan": []}}'),
        obj(CAMPAIGN, b'"segment": {"attributes": {"plan": [%s]}}' % b",".join([b"1"] * 101)),
        obj(CAMPAIGN, b'"segment": {"attributes": {"\xff": "pro"}}'),
        obj(CAMPAIGN, b'"segment": {"attributes": {"plan": "\xff"}}'),
        obj(CAMPAIGN, b'"segment": {"attributes": {"plan": {"nested": 1}}}'),
        obj(CAMPAIGN, b'"segment": {"attributes": {"plan": "pro"}, "upload": true}'),
        obj(CAMPAIGN, b'"segment": {"attributes": {"plan": 1e400}}'),
        obj(CAMPAIGN, b'"rate": 18446744073709551616'),
        obj(CAMPAIGN, b'"rate": NaN'),
    ],
    ("POST", UPLOAD): [
        obj(b'"recipients": %s' % DEEP),
        obj(b'"recipients": []'),
        obj(b'"recipients": [%s]' % b",".join(b'"u-%d"' % i for i in range(10_001))),
        obj(b'"recipients": ["%s"]' % (b"x" * 300)),
        obj(b'"recipients": ["u-\xe2\x82"]'),
        obj(b'"recipients": [1, null, []]'),
        obj(b'"recipients": ["u-1"], "recipients": 7'),
        obj(b'"recipients": ["u-1"], "segment": {"attributes": {"plan": "pro"}}'),
        # The flood's upload, whole: read and checked, then 404 for the campaign.
        obj(b'"recipients": [%s]' % b",".join(b'"u-%d"' % i for i in range(10_000))),
    ],
}

# Every time parameter, with a time outside the years 1-9999 in UTC or not a time at all.
QUERIES = [
    f"/v1/deliveries?since={FIRST}",
    f"/v1/deliveries?until={LAST}",
    "/v1/deliveries?since=0001-01-01T00:00:00 14:00",  # '+' sent unencoded
    "/v1/deliveries?since=%FF%FE",
    "/v1/deliveries?until=2026-11-29T12:00:00%00",
    f"/v1/deliveries?since={'9' * 5000}",
    "/v1/deliveries?cursor=%FF%FE",
    "/v1/deliveries?limit=18446744073709551616",
    f"/v1/dlq?since={FIRST}",
    f"/v1/dlq?until={LAST}",
    "/v1/dlq?since=%FF",
    "/v1/dlq?samples=1e400",
]


def hostile_requests() -> Iterator[Any]:
    for (method, path), bodies in BODIES.items():
        for name, body, content_type in SHAPES:
            yield pytest.param(method, path, body, content_type, id=f"{method} {path}: {name}")
        for number, body in enumerate(bodies):
            yield pytest.param(
                method, path, body, "application/json", id=f"{method} {path} #{number}"
            )


def assert_refused(response: httpx.Response) -> None:
    """A 4xx whose JSON says what is wrong; a batch's 200 holds one for each item."""
    assert 400 <= response.status_code < 500 or response.status_code == 200, response.text
    answer = response.json()
    refusals = answer["results"] if response.status_code == 200 else [answer]
    for refusal in refusals:
        assert 400 <= refusal["status_code"] < 500, response.text
        assert isinstance(refusal["detail"], str), response.text
        assert refusal["detail"].strip(), response.text


@pytest.mark.parametrize(("method", "path", "body", "content_type"), list(hostile_requests()))
def test_a_hostile_body_is_refused_saying_why(
    api: httpx.Client, method: str, path: str, body: bytes, content_type: str
) -> None:
    headers = {**AUTH, "Content-Type": content_type, "Idempotency-Key": f"hostile-{hash(body)}"}
    response = api.request(method, path, content=body, headers=headers)
    if not path.endswith("/batch"):  # a batch may answer 200, with a refusal per item
        assert 400 <= response.status_code < 500, response.text
    assert_refused(response)


@pytest.mark.parametrize("query", QUERIES)
def test_a_hostile_parameter_is_refused_saying_why(api: httpx.Client, query: str) -> None:
    response = api.get(query, headers=AUTH)
    assert 400 <= response.status_code < 500, response.text
    assert_refused(response)


BYTES_JSON = {b"Authorization": f"Bearer {API_KEY}".encode(), b"Content-Type": b"application/json"}


@pytest.mark.parametrize(
    "headers",
    [
        {b"Authorization": b"Bearer \xff\xfe"},
        {b"Authorization": b"Basic \xff\xfe"},
        {b"Authorization": b"\xc3\x28"},
        {**BYTES_JSON, b"Idempotency-Key": b"\xff" * 300},
    ],
)
def test_a_header_that_is_not_utf8_is_refused_saying_why(
    api: httpx.Client, headers: dict[bytes, bytes]
) -> None:
    body = msgspec.json.encode({"recipient": {"id": "u-1"}, "type": "otp"})
    response = api.post("/v1/notifications", content=body, headers=headers)
    assert 400 <= response.status_code < 500, response.text
    assert_refused(response)


def test_a_key_that_is_not_utf8_is_only_a_key(api: httpx.Client) -> None:
    # Header values are bytes; one that is not UTF-8 is still a key (read as Latin-1).
    body = obj(OTP, b'"data": {"code": "123456"}')
    headers = {**BYTES_JSON, b"Idempotency-Key": b"k-\xff\xfe"}
    first = api.post("/v1/notifications", content=body, headers=headers)
    again = api.post("/v1/notifications", content=body, headers=headers)
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.headers["Idempotent-Replayed"] == "true"


def test_a_dashboard_filter_that_is_not_utf8_is_refused(api: httpx.Client) -> None:
    response = api.get("/dashboard?channel=%FF&type=%FE", headers=AUTH)
    assert 400 <= response.status_code < 500, response.text


# Provider feedback (``/v1/feedback/<name>``) faces the internet without an API key: every
# header a scheme reads is hostile until the signature is checked, and every body is read only
# up to the provider's bound. Each is refused with a 4xx naming what is wrong, never a 5xx.
HOOK_SECRET = "whsec_" + base64.b64encode(b"hostile-input-feedback-secret-32").decode()
EVENT_SIGNER = ec.generate_private_key(ec.SECP256R1())  # SendGrid's, for the twin below
EVENT_KEY = base64.b64encode(
    EVENT_SIGNER.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()
FEEDBACK_PROVIDERS = f"""
[providers.sms]
kind = "twilio"
account_sid = "AC{"0" * 32}"
auth_token_env = "HOSTILE_TWILIO_TOKEN"
from = "+15005550006"

[providers.mail]
kind = "sendgrid"
api_key_env = "HOSTILE_SENDGRID_KEY"
from = "no-reply@example.com"
event_webhook_public_key = "{EVENT_KEY}"

[providers.hooks]
kind = "sandbox"
feedback_secret_env = "HOSTILE_HOOK_SECRET"
"""
STATUS = b"MessageSid=SM1&MessageStatus=delivered"
EVENTS = b'[{"event": "spamreport", "sg_event_id": "e1", "sg_message_id": "m1"}]'
HOOK = b'{"message_id": "m1", "feedback": "complained"}'
SG_SIGNATURE = b"X-Twilio-Email-Event-Webhook-Signature"
SG_TIME = b"X-Twilio-Email-Event-Webhook-Timestamp"
SG_SIGNED = "X-Twilio-Email-Event-Webhook-Signature: "
SG_TIMED = "X-Twilio-Email-Event-Webhook-Timestamp: "
NOW = b"<now>"  # replaced by the current Unix time when sent
SIGNATURES = [b"\xe9abc", b"v1,\xe9x", b"\xff\xfe", b"a" * 5000, b"!!!!", b"=", b"v1,"]
TIMES = [b"\xe9", b"\xb2", b"\xb9\xb2\xb3", b"-1", b"1e9", b"1" * 13, b"0x10"]

# (provider, headers, body, status, what the detail starts with)
FEEDBACK: list[tuple[str, dict[bytes, bytes], bytes, int, str]] = [
    *[("sms", {b"X-Twilio-Signature": s}, STATUS, 401, "X-Twilio-Signature: ") for s in SIGNATURES],
    ("sms", {}, STATUS, 401, "X-Twilio-Signature: missing"),
    ("sms", {b"X-Twilio-Signature": b"abc"}, b"\xff\xfe=\xc3\x28&%%%", 401, "X-Twilio-Signature: "),
    ("sms", {b"X-Twilio-Signature": b"abc"}, b"a=&" * 11_000, 413, "body: larger than 32768"),
    *[("mail", {SG_SIGNATURE: s, SG_TIME: NOW}, EVENTS, 401, SG_SIGNED)
      for s in [*SIGNATURES, base64.b64encode(b"\x30\x00"), b"AAAA" * 20]],
    *[("mail", {SG_SIGNATURE: b"AAAA", SG_TIME: t}, EVENTS, 401, SG_TIMED)
      for t in TIMES],
    ("mail", {SG_SIGNATURE: b"AAAA", SG_TIME: NOW}, DEEP, 401, SG_SIGNED),
    ("mail", {SG_SIGNATURE: b"AAAA", SG_TIME: NOW}, b" " * (4 * 1024 * 1024 + 1), 413, "body: "),
    *[("hooks", {b"webhook-id": b"msg_1", b"webhook-timestamp": NOW, b"webhook-signature": s},
       HOOK, 401, "webhook-signature: ")
      for s in [*SIGNATURES, b",", b"v1a,abc", b"v2,x ,,, v1", b"v1," + b"A" * 2000]],
    *[("hooks", {b"webhook-id": i, b"webhook-timestamp": NOW, b"webhook-signature": b"v1,abc"},
       HOOK, 401, "webhook-id: ")
      for i in [b"\xff", b"a b", b"m" * 300]],
    *[("hooks", {b"webhook-id": b"msg_1", b"webhook-timestamp": t, b"webhook-signature": b"v1,abc"},
       HOOK, 401, "webhook-timestamp: ")
      for t in TIMES],
    ("hooks", {b"webhook-id": b"msg_1", b"webhook-timestamp": NOW, b"webhook-signature": b"v1,abc"},
     b"[" + b" " * (1024 * 1024) + b"]", 413, "body: larger than 1048576"),
]  # fmt: skip


@pytest.fixture(scope="module")
def feedback_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A running API whose catalog has a provider of each callback scheme."""
    catalog = tmp_path_factory.mktemp("feedback") / "clarion.toml"
    shipped = (REPO / "clarion.toml").read_text()
    catalog.write_text(
        shipped.replace("[channels.PUSH]", FEEDBACK_PROVIDERS + "\n[channels.PUSH]", 1)
    )
    secrets = {"HOSTILE_TWILIO_TOKEN": "hostile-twilio-token", "HOSTILE_SENDGRID_KEY": "SG.x",
               "HOSTILE_HOOK_SECRET": HOOK_SECRET}  # fmt: skip
    with (
        running_api(CLARION_CONFIG=str(catalog), **secrets) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        yield client


@pytest.mark.parametrize(
    ("provider", "headers", "body", "status", "detail"),
    [pytest.param(*case, id=f"{case[0]} #{n}") for n, case in enumerate(FEEDBACK)],
)
def test_a_hostile_feedback_callback_is_refused_saying_why(
    feedback_api: httpx.Client, provider: str, headers: dict[bytes, bytes], body: bytes,
    status: int, detail: str,
) -> None:  # fmt: skip
    now = str(int(time.time())).encode()
    sent = {name: now if value == NOW else value for name, value in headers.items()}
    response = feedback_api.post(f"/v1/feedback/{provider}", content=body, headers=sent)
    assert response.status_code == status, response.text
    assert_refused(response)
    assert response.json()["detail"].startswith(detail), response.text


def raw_answer(url: str, head: bytes, chunks: list[bytes]) -> bytes:
    """The first bytes answered to a request sent as ``head`` and ``chunks`` over a socket,
    the body never finished: an answer shows the server did not wait for the rest."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(head)
        for chunk in chunks:
            connection.sendall(chunk)
        answer = b""
        while not answer_complete(answer) and (more := connection.recv(4096)):
            answer += more
        return answer


def answer_complete(answer: bytes) -> bool:
    """Whether ``answer`` holds a whole answer: its head and the body its head announces."""
    head, found, body = answer.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    return bool(found) and (length is None or len(body) >= int(length[1]))


def test_a_callback_over_its_bound_is_refused_before_the_rest_is_read(
    feedback_api: httpx.Client,
) -> None:
    url = str(feedback_api.base_url).rstrip("/")
    path = b"POST /v1/feedback/sms HTTP/1.1\r\nHost: x\r\nX-Twilio-Signature: abc\r\n"
    announced = raw_answer(url, path + b"Content-Length: 100000000\r\n\r\n", [b"a=b"])
    assert announced.startswith(b"HTTP/1.1 413"), announced
    # Chunked, past Twilio's 32 KiB, and never ended.
    chunk = b"2000\r\n" + b"a" * 0x2000 + b"\r\n"
    streamed = raw_answer(url, path + b"Transfer-Encoding: chunked\r\n\r\n", [chunk] * 5)
    assert streamed.startswith(b"HTTP/1.1 413"), streamed


def test_a_signed_sendgrid_batch_sent_again_under_its_twin_signature_is_a_replay(
    feedback_api: httpx.Client,
) -> None:
    # Whoever saw a signed batch can respell its signature (r, s) as (r, n - s), which
    # verifies as well; the batch is the same, so it is refused as a replay.
    now = str(int(time.time())).encode()
    r, s = decode_dss_signature(EVENT_SIGNER.sign(now + EVENTS, ec.ECDSA(hashes.SHA256())))
    n = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551  # P-256's order
    statuses = []
    for signature in (encode_dss_signature(r, s), encode_dss_signature(r, n - s)):
        headers = {SG_SIGNATURE: base64.b64encode(signature), SG_TIME: now}
        response = feedback_api.post("/v1/feedback/mail", content=EVENTS, headers=headers)
        statuses.append(response.status_code)
    assert statuses == [200, 409]


@pytest.mark.parametrize("host", [b"x:99999", b"[::1]:65536"])
def test_a_host_no_url_can_hold_is_refused_where_twilio_signs_the_url(
    feedback_api: httpx.Client, host: bytes
) -> None:
    # Without CLARION_PUBLIC_URL the URL Twilio signed is the request's own, made from Host.
    url = str(feedback_api.base_url).rstrip("/")
    head = b"POST /v1/feedback/sms HTTP/1.1\r\nHost: %s\r\nX-Twilio-Signature: abc\r\n" % host
    answer = raw_answer(url, head + b"Content-Length: %d\r\n\r\n" % len(STATUS), [STATUS])
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert b"Host: not a host and port" in answer, answer


# --- recipient tokens, revocation and one-click unsubscribe ---------------------------------

INBOX_ENDPOINTS = [
    ("GET", "/v1/inbox"),
    ("GET", "/v1/inbox/counts"),
    ("GET", "/v1/inbox/stream"),
    ("POST", "/v1/inbox/read-all"),
    ("POST", "/v1/inbox/0190a7c0-0000-7000-8000-000000000000/read"),
]
# Recipient tokens that grant nothing, as the Authorization header's bytes.
HOSTILE_TOKENS = [
    b"Bearer d.", b"Bearer .AAAA", b"Bearer d.\xff\xfe", b"Bearer \xc3\x28.AAAA",
    b"Bearer zz.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", b"Bearer d." + b"A" * 5000,
    b"Bearer " + b"k" * 40 + b".AAAA", b"Bearer d.####", b"Bearer d.AQ..AQ",
    b"Bearer AWtJ7oB1c2VyLTQyq6urq6urq6urq6urq6urqw",  # the format before key ids
    b"Bearer", b"bearer  d.AAAA", b"Basic \xff",
]  # fmt: skip


@pytest.mark.parametrize(("method", "path"), INBOX_ENDPOINTS)
@pytest.mark.parametrize("authorization", HOSTILE_TOKENS)
def test_a_hostile_recipient_token_is_refused_saying_why(
    api: httpx.Client, method: str, path: str, authorization: bytes
) -> None:
    response = api.request(method, path, headers={b"Authorization": authorization})
    assert response.status_code == 401, response.text
    assert_refused(response)


def recipient_token(api: httpx.Client, recipient_id: str = "u-1") -> str:
    made = api.post(f"{RECIPIENT[:-3]}/{recipient_id}/inbox-tokens", json={}, headers=AUTH)
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


@pytest.mark.parametrize(("method", "path"), INBOX_ENDPOINTS)
def test_a_revoked_or_query_token_is_refused_saying_why(
    api: httpx.Client, method: str, path: str
) -> None:
    token = recipient_token(api, "u-hostile")
    if not path.endswith("/stream"):  # ?token= is for EventSource only
        response = api.request(method, f"{path}?token={token}")
        assert response.status_code == 401, response.text
        assert_refused(response)
    revoked = api.post("/v1/recipients/u-hostile/inbox-tokens/revoke", headers=AUTH)
    assert revoked.status_code == 200, revoked.text
    response = api.request(method, path, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401, response.text
    assert_refused(response)


# (Any 1-255 printable characters are a recipient id, as when a token is made.)
@pytest.mark.parametrize("recipient", ["a" * 300, "%00", "u-1%0D%0AX: y", "%7F", "%1B[31m"])
def test_a_revoke_for_a_hostile_recipient_id_is_refused_saying_why(
    api: httpx.Client, recipient: str
) -> None:
    response = api.post(f"/v1/recipients/{recipient}/inbox-tokens/revoke", headers=AUTH)
    assert 400 <= response.status_code < 500, response.text
    assert_refused(response)


# What a browser adds when another site's page makes it post (cross-site request forgery):
# the dashboard's Basic credentials it holds, the page's origin, its word on the site; and
# header values no browser sends.
BASIC = "Basic " + base64.b64encode(f"fuzz:{API_KEY}".encode()).decode()
CROSS_SITE: list[dict[bytes, bytes]] = [
    {b"Authorization": BASIC.encode(), b"Content-Type": b"text/plain",
     b"Origin": b"https://evil.example"},
    {b"Authorization": BASIC.encode(), b"Content-Type": b"application/json"},
    {**BYTES_JSON, b"Origin": b"https://evil.example"},
    {**BYTES_JSON, b"Origin": b"null"},
    {**BYTES_JSON, b"Origin": b"https://evil.example\xff\xfe"},
    {**BYTES_JSON, b"Origin": b"x" * 8000},
    {**BYTES_JSON, b"Sec-Fetch-Site": b"cross-site"},
    {**BYTES_JSON, b"Sec-Fetch-Site": b"same-site", b"Origin": b"https://other.127.0.0.1"},
    {**BYTES_JSON, b"Sec-Fetch-Site": b"\xff", b"Origin": b"https://evil.example"},
    {b"Authorization": f"Bearer {API_KEY}".encode(), b"Content-Type": b"text/\xff\xfe"},
    {b"Authorization": f"Bearer {API_KEY}".encode(), b"Content-Type": b"a" * 8000},
    {b"Authorization": f"Bearer {API_KEY}".encode(), b"Content-Type": b";;;"},
]  # fmt: skip


# A valid body for each endpoint above: taken from a server, refused from another site.
VALID: dict[tuple[str, str], bytes] = {
    ("POST", "/v1/notifications"): obj(OTP, b'"data": {"code": "123456"}'),
    ("PUT", f"{RECIPIENT}/preferences"): obj(b'"preferences": []'),
    ("PUT", f"{RECIPIENT}/quiet-hours"): obj(QUIET, b'"timezone": "UTC"'),
    ("POST", "/v1/dlq/replay"): obj(REPLAY),
    ("POST", "/v1/notifications/batch"): obj(
        b'"notifications": [%s]' % obj(ITEM, b'"data": {"code": "123456"}')
    ),
}


@pytest.mark.parametrize("headers", CROSS_SITE)
@pytest.mark.parametrize(("method", "path"), list(VALID))
def test_a_cross_site_or_mistyped_request_is_refused_saying_why(
    api: httpx.Client, method: str, path: str, headers: dict[bytes, bytes]
) -> None:
    sent = {**headers, b"Idempotency-Key": b"cross-site"}
    response = api.request(method, path, content=VALID[method, path], headers=sent)
    assert 400 <= response.status_code < 500, response.text
    assert_refused(response)


def unsubscribe_path() -> str:
    """A working one-click link of the running API (its digest secret is the tests')."""
    tokens = UnsubscribeTokens(DIGEST_SECRET)
    opt_out = OptOut("u-hostile", "order_confirmed", Channel.EMAIL, int(time.time()) + 3600)
    return f"/v1/unsubscribe/{tokens.make(opt_out)}"


FORM = "application/x-www-form-urlencoded"
# One-click POSTs that are not RFC 8058's form: (body, content type; None: no header).
NOT_ONE_CLICK: list[tuple[bytes, str | None]] = [
    (b"", None), (b"", FORM), (b"foo=bar", FORM), (b"List-Unsubscribe=One-Click", "text/plain"),
    (b"List-Unsubscribe=One-Click", None), (b"List-Unsubscribe=one-click", FORM),
    (b"List-Unsubscribe=One-Click&List-Unsubscribe=One-Click", FORM),
    (b"List-Unsubscribe=One-Click\xff", FORM), (b"%ZZ=%ZZ&" * 100, FORM),
    (b"=" * 1000, FORM), (b"&" * 1000, FORM), (b'{"List-Unsubscribe": "One-Click"}',
    "application/json"), (b"garbage", "multipart/form-data; boundary=x"),
    (b"List-Unsubscribe=One-Click", "multipart/form-data"),
    (b'--x\r\nContent-Disposition: form-data; name="List-Unsubscribe"\r\n'
     b"Content-Type: text/plain; charset=utf-8\r\n\r\nOne-Click\xe9\r\n--x--\r\n",
     "multipart/form-data; boundary=x"),
    (b'--x\r\nContent-Disposition: form-data; name="List-Unsubscribe"\r\n'
     b"Content-Type: text/plain; charset=no-such-charset\r\n\r\nOne-Click\r\n--x--\r\n",
     "multipart/form-data; boundary=x"),
    (b"--x\r\n" * 200, "multipart/form-data; boundary=x"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "content_type"), NOT_ONE_CLICK)
def test_an_unsubscribe_post_without_the_one_click_form_changes_nothing(
    api: httpx.Client, body: bytes, content_type: str | None
) -> None:
    path = unsubscribe_path()
    headers = {"Content-Type": content_type} if content_type else {}
    response = api.post(path, content=body, headers=headers)
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("text/html")
    settings = api.get("/v1/recipients/u-hostile/settings", headers=AUTH)
    assert settings.status_code == 404 or settings.json()["version"] == 0, settings.text


@pytest.mark.parametrize(("method", "path"), list(VALID))
def test_the_same_request_from_a_server_is_taken(api: httpx.Client, method: str, path: str) -> None:
    sent = {**BYTES_JSON, b"Idempotency-Key": b"from-a-server"}
    response = api.request(method, path, content=VALID[method, path], headers=sent)
    assert response.status_code in (200, 202), response.text
    if path.endswith("/batch"):
        assert response.json()["results"][0]["status_code"] == 202, response.text


# Request heads past the server's limit (CLARION_MAX_HEADER_BYTES, 32 KiB by default): one
# long header, many short ones, a long URL. Each is refused with a JSON 431 before the app
# sees it; a 64 MiB header used to be read whole and answered.
OVERSIZED_HEADS: list[tuple[str, dict[str, str]]] = [
    ("/v1/ops/health", {"X-Padding": "a" * (64 << 10)}),
    ("/v1/ops/health", {f"X-Header-{n}": "b" * 20 for n in range(2000)}),
    ("/v1/ops/health?" + "q=" + "c" * (40 << 10), {}),
    ("/v1/notifications", {"Authorization": "Bearer " + "k" * (40 << 10)}),
]


@pytest.mark.parametrize(("path", "headers"), OVERSIZED_HEADS)
def test_a_request_head_past_the_limit_is_refused_saying_why(
    api: httpx.Client, path: str, headers: dict[str, str]
) -> None:
    response = api.get(path, headers=headers)
    assert response.status_code == 431, response.text[:300]
    assert_refused(response)


# Last-Event-ID values an inbox stream may be sent: from before any feed (a whole re-read),
# past every entry, of shards the deployment has not, too long, not a cursor at all.
LAST_EVENT_IDS = [
    b"0:0-1", b"0:99999999999999999999-0", b"9:1-0", b"0:1-0," * 1000, b"\xff\xfe",
    b"0:-1-0", b"", b"0:18446744073709551616-0", b"\xb2:1-0", b"0:\xb9-0",
]  # fmt: skip


@pytest.mark.parametrize("last_event_id", LAST_EVENT_IDS)
def test_a_hostile_last_event_id_starts_a_stream_or_is_refused_never_a_5xx(
    api: httpx.Client, last_event_id: bytes
) -> None:
    answer = api.post("/v1/recipients/u-hostile/inbox-tokens", json={}, headers=AUTH)
    assert answer.status_code == 201, answer.text
    token = answer.json()["token"]
    headers = {b"Last-Event-ID": last_event_id}
    with api.stream("GET", f"/v1/inbox/stream?token={token}", headers=headers) as response:
        assert response.status_code in (200, 400, 429), response.read()[:300]
        if response.status_code == 200:
            first = next(line for line in response.iter_lines() if line.startswith("event:"))
            assert first in ("event: counts", "event: reset")
