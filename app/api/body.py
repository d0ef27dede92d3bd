"""Decoding request bodies ourselves, so every mistake is answered naming its field.

Every endpoint that takes a JSON body reads it with ``read_json``, which first requires
``Content-Type: application/json`` (415 otherwise, before the body is read). A browser's
form may post to any site without asking it first, but only as ``text/plain``, a form or
multipart, never as ``application/json``: so a page of another site cannot make a browser
send a body shaped like JSON that is taken as such. The endpoints whose protocol posts
another type (a provider's feedback callback, the one-click unsubscribe form) read their
bodies themselves, as their protocol says.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, TypeVar

import msgspec
from litestar import Request
from litestar.di import Provide
from litestar.exceptions import ClientException

from app.api.errors import NotJson
from app.ingest.requests import MAX_DATA_DEPTH
from app.validation import describe

T = TypeVar("T")
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}

# Deeper than any valid body nests: every field has a fixed shape of a few levels except
# ``data``, which is refused past MAX_DATA_DEPTH. So a value cut at this depth (see
# ``_cut_deep``) is always refused by validation, never taken for what was sent.
CUT_DEPTH = MAX_DATA_DEPTH + 16
_TOO_DEEP = f"body: objects and arrays nested deeper than {CUT_DEPTH} levels"
# Finding what to cut reads the body at 5-30 ns a byte and takes about 0.4 µs per run of
# brackets; past these bounds (25 ms at most) the body is refused whole, a batch with it.
# 1000 batch items like the full body in docs/using/api.md are 190 KB with 6,000 runs.
_CUT_MAX_BYTES = 1 << 20
_CUT_MAX_RUNS = 50_000

# A run of opening or of closing brackets, then the text up to the next bracket outside a
# string, strings read whole ("?: or up to the end, if one is never closed): a run's length
# is how much deeper or shallower it goes. The text part is Friedl's unrolled loop with
# possessive quantifiers, and no part can fail once a run has matched, so nothing is read
# twice.
_RUNS = re.compile(
    rb"(?:(?P<open>[\[{]++)|(?P<close>[\]}]++))"
    rb'[^"\[\]{}]*+(?:"[^"\\]*+(?:\\.[^"\\]*+)*+"?[^"\[\]{}]*+)*+',
    re.DOTALL,
)


JSON_TYPE = b"application/json"
# How much of a wrong Content-Type an answer repeats.
_SHOWN_TYPE = 60


async def read_json(request: Request[Any, Any, Any], body_type: type[T]) -> T:
    """The request's body decoded into ``body_type`` (``decode_body``); 415 unless it is
    declared ``application/json`` (parameters such as ``; charset=utf-8`` aside)."""
    require_json(request.scope["headers"])
    return decode_body(await request.body(), body_type)


def require_json(headers: Any) -> None:
    """Nothing if the ASGI ``headers`` declare a JSON body; else ``NotJson`` naming what they
    declare.

    Straight from the ASGI scope, as ``app.api.auth`` reads its header: Litestar's parsed
    ``content_type`` costs more than the check. A header given twice keeps the first.
    """
    for name, value in headers:
        if name == b"content-type":
            media_type = value.partition(b";")[0].strip().lower()
            if media_type == JSON_TYPE:
                return
            shown = value.decode("latin-1")[:_SHOWN_TYPE]
            raise NotJson(detail=f"Content-Type: 'application/json' is required, got {shown!r}")
    raise NotJson(detail="Content-Type: 'application/json' is required, none was given")


def decode_body(raw: bytes, body_type: type[T]) -> T:
    """Decode JSON into ``body_type``: 400 for broken JSON, 422 naming the invalid field."""
    if not raw.strip():
        raise ClientException(status_code=400, detail="body: a JSON object is required")
    decoder: msgspec.json.Decoder[T] | None = _decoders.get(body_type)
    if decoder is None:
        decoder = _decoders[body_type] = msgspec.json.Decoder(body_type)
    try:
        return _decoded(decoder, raw)
    except RecursionError:
        pass
    # msgspec follows nesting as deep as Python's recursion limit lets it (about 900 levels in
    # a handler), then gives up without saying where. With what lies deeper than CUT_DEPTH
    # cut off, validation names the field, and a batch still splits into its items so that
    # the deep one fails alone.
    cut = _cut_deep(raw, CUT_DEPTH)
    if cut is not None:
        with contextlib.suppress(RecursionError):
            return _decoded(decoder, cut)
    raise ClientException(status_code=400, detail=_TOO_DEEP)


def _decoded(decoder: msgspec.json.Decoder[T], raw: bytes) -> T:
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as error:
        raise ClientException(status_code=422, detail=describe(error)) from None
    except msgspec.DecodeError as error:
        raise ClientException(status_code=400, detail=f"body: {error}") from None
    except UnicodeDecodeError as error:  # msgspec checks UTF-8 only inside strings
        raise ClientException(
            status_code=400, detail=f"body: a string is not valid UTF-8 ({error.reason})"
        ) from None


def _cut_deep(raw: bytes, limit: int) -> bytes | None:
    """``raw`` with each object or array nested deeper than ``limit`` levels replaced by
    ``[]``; None when the body is too large or has too many runs of brackets to look.

    Only called for a body msgspec found too deep, which starts with a bracket. Broken JSON
    stays broken, so the decoder still names what is wrong with it.
    """
    if len(raw) > _CUT_MAX_BYTES:
        return None
    pieces: list[bytes] = []
    depth = copied = 0
    cut_from = -1  # where the value being cut starts; -1 while none is
    for count, run in enumerate(_RUNS.finditer(raw)):
        if count == _CUT_MAX_RUNS:
            return None
        if run.lastgroup == "open":
            start, end = run.span("open")
            if cut_from < 0 and depth + end - start > limit:
                cut_from = start + limit - depth
            depth += end - start
        else:
            start, end = run.span("close")
            if cut_from >= 0 and depth - (end - start) <= limit:
                pieces += (raw[copied:cut_from], b"[]")
                copied = start + depth - limit
                cut_from = -1
            depth -= end - start
    pieces.append(raw[copied:] if cut_from < 0 else raw[copied:cut_from])
    return b"".join(pieces)


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
