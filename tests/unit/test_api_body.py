"""Request bodies decoded by the API itself: 400 for what is not JSON, 422 naming the field
that is wrong, and the body type documented in the OpenAPI schema all the same."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest
from litestar import Litestar, Request, post
from litestar.exceptions import ClientException

from app.api.body import decode_body, documented_body
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
    body = decode_body(await request.body(), Greeting)
    return {"hello": body.name}


async def test_a_documented_body_is_in_the_schema_yet_decoded_by_the_handler() -> None:
    app = Litestar([greet], debug=False, logging_config=None)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        schema = (await client.get("/schema/openapi.json")).json()
        answered = await client.post("/greet", content=b'{"name": "Ada"}')
        wrong = await client.post("/greet", content=b'{"name": 7}')
    body = schema["paths"]["/greet"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("Greeting")
    assert answered.json() == {"hello": "Ada"}
    assert (wrong.status_code, wrong.json()["detail"]) == (422, "name: Expected `str`, got `int`")
