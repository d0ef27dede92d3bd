"""Decoding request bodies ourselves, so every mistake is answered naming its field."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from litestar.di import Provide
from litestar.exceptions import ClientException

from app.validation import describe

T = TypeVar("T")
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def decode_body(raw: bytes, body_type: type[T]) -> T:
    """Decode JSON into ``body_type``: 400 for broken JSON, 422 naming the invalid field."""
    if not raw.strip():
        raise ClientException(status_code=400, detail="body: a JSON object is required")
    decoder = _decoders.get(body_type)
    if decoder is None:
        decoder = _decoders[body_type] = msgspec.json.Decoder(body_type)
    try:
        result: T = decoder.decode(raw)
    except msgspec.ValidationError as error:
        raise ClientException(status_code=422, detail=describe(error)) from None
    except msgspec.DecodeError as error:
        raise ClientException(status_code=400, detail=f"body: {error}") from None
    return result


def documented_body(body_type: type[Any]) -> dict[str, Provide]:
    """Dependencies that only document ``body_type`` as the request body in OpenAPI.

    Litestar takes the body schema from a ``data`` parameter of the handler or of one of its
    dependencies. Handlers here read the raw body and decode it with ``decode_body`` instead,
    to control the error answers; this dependency is never called because no handler asks for
    it by name.
    """

    def body_schema(data: Any) -> None:
        raise AssertionError("documentation only")

    body_schema.__annotations__["data"] = body_type
    return {"body_schema": Provide(body_schema, sync_to_thread=False)}
