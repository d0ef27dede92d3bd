"""Hostile input to a running API: bodies nested past what the decoder follows, strings that
are not UTF-8, names that are no time zone, times outside the years 1-9999 in UTC, numbers
past every limit, NaN, duplicate keys, bodies that are no object or nothing at all, wrong
content types, a byte order mark. Each is answered with a 4xx whose JSON ``detail`` says
what is wrong (a batch: 200, with such an answer for each item), never with a 5xx; and the
API logs no traceback meanwhile (``running_api``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest

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
    b"0:-1-0", b"", b"0:18446744073709551616-0",
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
