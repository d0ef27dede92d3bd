"""Request bodies decoded by the API itself: 415 unless declared JSON, 400 for what is not
JSON, 422 naming the field that is wrong, and the body type documented in the OpenAPI schema
all the same."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest
from litestar import Litestar, Request, post
from litestar.exceptions import ClientException

from app.api.body import CUT_DEPTH, decode_body, documented_body, read_json
from app.api.schemas import BatchRequest
from app.ingest.requests import NotificationRequest


def refused(raw: bytes) -> ClientException:
    with pytest.raises(ClientException) as caught:
        decode_body(raw, NotificationRequest)
    return caught.value


def test_a_valid_body_is_decoded_into_its_type() -> None:
    raw = b'{"recipient": {"id": "u-1", "phone": "+4915112345678"}, "type": "otp"}'
    request = decode_body(raw, NotificationRequest)
    assert isinstance(request, NotificationRequest)
    assert (request.recipient.id, request.recipient.phone, request.type) == (
        "u-1", "+4915112345678", "otp",
    )  # fmt: skip


@pytest.mark.parametrize("raw", [b"", b"  \n "])
def test_no_body_at_all_is_400(raw: bytes) -> None:
    error = refused(raw)
    assert (error.status_code, error.detail) == (400, "body: a JSON object is required")


def test_broken_json_is_400_naming_the_body() -> None:
    error = refused(b'{"recipient": ')
    assert error.status_code == 400
    assert str(error.detail).startswith("body: ")


def test_an_invalid_field_is_422_naming_it() -> None:
    error = refused(b'{"recipient": {"id": "u-1", "phone": 42}, "type": "otp"}')
    assert error.status_code == 422
    assert str(error.detail).startswith("recipient.phone: ")
    assert refused(b"[]").status_code == 422  # JSON, but not an object


class Greeting(msgspec.Struct):
    name: str


@post("/greet", dependencies=documented_body(Greeting), status_code=200)
async def greet(request: Request[Any, Any, Any]) -> dict[str, str]:
    body = await read_json(request, Greeting)
    return {"hello": body.name}


JSON = {"Content-Type": "application/json"}


async def test_a_documented_body_is_in_the_schema_yet_decoded_by_the_handler() -> None:
    app = Litestar([greet], debug=False, logging_config=None)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        schema = (await client.get("/schema/openapi.json")).json()
        answered = await client.post("/greet", content=b'{"name": "Ada"}', headers=JSON)
        wrong = await client.post("/greet", content=b'{"name": 7}', headers=JSON)
    body = schema["paths"]["/greet"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("Greeting")
    assert answered.json() == {"hello": "Ada"}
    assert (wrong.status_code, wrong.json()["detail"]) == (422, "name: Expected `str`, got `int`")


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON ;charset=UTF-8"],
)
async def test_a_body_declared_json_is_read(content_type: str) -> None:
    transport = httpx.ASGITransport(app=Litestar([greet], debug=False, logging_config=None))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.post(
            "/greet", content=b'{"name": "Ada"}', headers={"Content-Type": content_type}
        )
    assert answer.json() == {"hello": "Ada"}


@pytest.mark.parametrize(
    ("content_type", "named"),
    [
        # What a form of any site may post without asking first, shaped like JSON or not.
        ("text/plain", "got 'text/plain'"),
        ("text/plain; charset=utf-8", "got 'text/plain; charset=utf-8'"),
        ("application/x-www-form-urlencoded", "got 'application/x-www-form-urlencoded'"),
        ("multipart/form-data; boundary=x", "got 'multipart/form-data; boundary=x'"),
        ("application/jsonx", "got 'application/jsonx'"),
        ("application/vnd.api+json", "got 'application/vnd.api+json'"),
        ("application/json-seq", "got 'application/json-seq'"),
        ("", "got ''"),
        ("x" * 500, "got '" + "x" * 60 + "'"),
        (None, "none was given"),
    ],
)
async def test_a_body_not_declared_json_is_415_naming_the_type_wanted(
    content_type: str | None, named: str
) -> None:
    transport = httpx.ASGITransport(app=Litestar([greet], debug=False, logging_config=None))
    headers = {} if content_type is None else {"Content-Type": content_type}
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.post("/greet", content=b'{"name": "Ada"}', headers=headers)
    assert answer.status_code == 415
    assert answer.json()["detail"] == f"Content-Type: 'application/json' is required, {named}"


def nested(depth: int, inner: bytes = b"1") -> bytes:
    """``inner`` inside ``depth`` arrays."""
    return b"[" * depth + inner + b"]" * depth


# Far deeper than msgspec follows (its recursion limit, about 1000 levels) in any context.
TOO_DEEP = 5000


def test_data_nested_past_the_decoders_limit_is_422_naming_data() -> None:
    error = refused(
        b'{"recipient": {"id": "u"}, "type": "otp", "data": {"x": %s}}' % nested(TOO_DEEP)
    )
    assert error.status_code == 422
    assert str(error.detail) == "data: objects and arrays nest at most 32 levels deep"


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        (b'{"recipient": %s, "type": "otp"}' % nested(TOO_DEEP), "recipient: Expected `object`"),
        (nested(TOO_DEEP), "Expected `object`, got `array`"),
        (
            b'{"recipient": {"id": "u"}, "type": "otp", "x": %s}' % nested(TOO_DEEP),
            "Object contains",
        ),
    ],
)
def test_nesting_past_the_decoders_limit_anywhere_is_refused_naming_the_field(
    raw: bytes, detail: str
) -> None:
    error = refused(raw)
    assert error.status_code == 422
    assert str(error.detail).startswith(detail)


def test_deep_broken_json_is_still_400() -> None:
    error = refused(b'{"recipient": {"id": "u"}, "type": "otp", "data": {"x": ' + b"[" * TOO_DEEP)
    assert error.status_code == 400
    assert str(error.detail) == "body: Input data was truncated"


def test_a_deep_body_too_large_to_look_into_is_400_naming_the_body() -> None:
    padding = b'"' + b"p" * (2 << 20) + b'"'
    raw = b'{"recipient": {"id": "u"}, "type": "otp", "data": {"p": %s, "x": %s}}' % (
        padding, nested(TOO_DEEP),
    )  # fmt: skip
    error = refused(raw)
    assert error.status_code == 400
    assert str(error.detail) == f"body: objects and arrays nested deeper than {CUT_DEPTH} levels"


def test_a_deep_batch_item_is_cut_and_the_others_stay_exactly_as_sent() -> None:
    # Brackets inside strings are text, escaped quotes and backslashes too: none of them may
    # throw the cut off.
    strings = b'"s": "]]]}}}[[[{{{\\"]", "b": "\\\\", "c": "]]"'
    good = b'{"idempotency_key": "a", "data": {%s, "n": [[1], {"k": []}]}}' % strings
    deep = b'{"idempotency_key": "b", "data": {"x": %s}, "after": "kept"}' % nested(TOO_DEEP)
    batch = decode_body(b'{"notifications": [%s, %s, %s]}' % (good, deep, good), BatchRequest)
    first, cut, last = (bytes(raw) for raw in batch.notifications)
    assert first == last == good
    assert cut.startswith(b'{"idempotency_key": "b", "data": {"x": [[[')
    assert cut.endswith(b']]]}, "after": "kept"}')
    # The envelope, the list, the item and data are four levels: the arrays below them are
    # kept down to CUT_DEPTH, and what lies deeper is one empty array.
    assert cut.count(b"[") == cut.count(b"]") == CUT_DEPTH - 4 + 1


@pytest.mark.parametrize(
    "raw",
    [
        b'{"recipient": {"id": "u\xff"}, "type": "otp"}',
        b'{"recipient": {"id": "u"}, "type": "otp", "data": {"\xc3\x28": 1}}',
        b'{"recipient": {"id": "u"}, "type": "otp", "data": {"x": "\xed\xa0\x80"}}',  # surrogate
    ],
)
def test_a_string_that_is_not_utf8_is_400_naming_the_body(raw: bytes) -> None:
    error = refused(raw)
    assert error.status_code == 400
    assert str(error.detail).startswith("body: a string is not valid UTF-8 (")
