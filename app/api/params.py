"""Query parameters: how optional ones are documented in the OpenAPI schema, the filters
several endpoints share, and the checks that answer 422 naming the parameter, among them
the refusal of a parameter the endpoint does not take (``refuse_unknown_query``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final, TypeVar

from litestar import Litestar, Request
from litestar.exceptions import ClientException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.spec import OpenAPIType
from litestar.params import QueryParameter
from litestar.routes import HTTPRoute

from streams.core.vocabulary import CHANNELS, ERROR_CLASSES

MAX_TYPE_LENGTH = 64
# A route handler's ``opt`` key: the query parameters it reads from the request itself, not
# as arguments of its own (``refuse_unknown_query`` takes them as known).
READS_QUERY: Final = "reads_query"
# In a handler's ``opt``: it takes any query parameter (a provider's callback URL).
ANY_QUERY: Final = "any_query"
# Litestar answers these itself for every route.
_UNCHECKED_METHODS: Final = frozenset({"HEAD", "OPTIONS"})
# How much of an unknown parameter's name an answer repeats.
_SHOWN_NAME = 64
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def query_schema(kind: OpenAPIType = OpenAPIType.STRING, **extra: Any) -> dict[str, Any]:
    """The documented schema of an optional query parameter: plain ``kind``, not "string or
    null" (an absent parameter is absent). Values are checked by the handler, to answer 422
    naming the parameter, so no constraint here is enforced by Litestar."""
    return {"one_of": None, "type": kind, **extra}


ChannelFilter = Annotated[
    str | None,
    QueryParameter(description="Only this channel", schema_extra=query_schema(enum=list(CHANNELS))),
]
ErrorClassFilter = Annotated[
    str | None,
    QueryParameter(
        description="Only this error class (of the latest failure)",
        schema_extra=query_schema(enum=list(ERROR_CLASSES)),
    ),
]


Word = TypeVar("Word", bound=str)


def one_of(name: str, value: str | None, allowed: Sequence[Word]) -> Word | None:
    """The member of ``allowed`` that ``value`` is (None when absent); 422 naming ``name``
    otherwise."""
    if value is None:
        return None
    for member in allowed:
        if member == value:
            return member
    raise ClientException(status_code=422, detail=f"{name}: must be one of {', '.join(allowed)}")


def type_filter(value: str | None) -> str | None:
    """A notification type to filter by: 1-64 printable characters (or absent)."""
    if value is None or (0 < len(value) <= MAX_TYPE_LENGTH and value.isprintable()):
        return value
    raise ClientException(
        status_code=422, detail=f"type: 1-{MAX_TYPE_LENGTH} printable characters are required"
    )


def time_filter(name: str, value: str | None) -> datetime | None:
    """An ISO 8601 time; UTC when it has no offset. An offset's ``+`` that arrived as a
    space (unencoded in the query string) is read as the ``+`` it was."""
    if value is None:
        return None
    text = value.strip()
    before, space, after = text.rpartition(" ")
    for candidate in (text, f"{before}+{after}" if space else text):
        parsed = _iso_time(candidate)
        if parsed is not None:
            return _in_utc_range(name, parsed)
    raise ClientException(
        status_code=422, detail=f"{name}: must be an ISO 8601 time, e.g. 2026-11-29T12:00:00Z"
    )


def _iso_time(text: str) -> datetime | None:
    # Only printable text: fromisoformat passes over a NUL (12:00\x00+05:00 is 12:00+05:00).
    if not text.isprintable():
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _in_utc_range(name: str, moment: datetime) -> datetime:
    # 0001-01-01T00:00:00+14:00 is valid ISO 8601 but falls before year 1 in UTC (and
    # 9999-12-31T23:59:59-14:00 after year 9999), where no datetime goes: the database
    # driver, converting it to UTC, would fail with a 500.
    try:
        moment.astimezone(UTC)
    except OverflowError:
        raise ClientException(
            status_code=422,
            detail=f"{name}: must be from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z",
        ) from None
    return moment


def page_size(value: str | None, default: int, most: int) -> int:
    """``limit``: a whole number from 1 to ``most``; ``default`` when absent."""
    if value is None:
        return default
    text = value.strip()
    if text.isdigit() and len(text) <= 4 and 1 <= int(text) <= most:
        return int(text)
    raise ClientException(status_code=422, detail=f"limit: must be an integer from 1 to {most}")


def from_ms(ms: int) -> datetime:
    """A UTC time from milliseconds since the epoch."""
    return _EPOCH + timedelta(milliseconds=ms)


def declared_query(app: Litestar) -> dict[HTTPRouteHandler, frozenset[str]]:
    """The query parameters each endpoint of the OpenAPI schema takes, whatever its method:
    those it declares (its own and its dependencies', as Litestar resolved them) and those
    its ``opt`` names under ``READS_QUERY``. Pages for browsers (left out of the schema) are
    not listed: a link may carry what it likes to them; nor are the endpoints whose ``opt``
    sets ``ANY_QUERY`` (the providers' callbacks: the provider owns that URL)."""
    declared: dict[HTTPRouteHandler, frozenset[str]] = {}
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for method, (handler, kwargs_model) in route.route_handler_map.items():
            if method in _UNCHECKED_METHODS or handler.opt.get(ANY_QUERY):
                continue
            if handler.resolve_include_in_schema():
                names = {parameter.field_alias for parameter in kwargs_model.expected_query_params}
                declared[handler] = frozenset(names | set(handler.opt.get(READS_QUERY, ())))
    return declared


def refuse_unknown_query(
    request: Request[Any, Any, Any], declared: Mapping[HTTPRouteHandler, frozenset[str]]
) -> None:
    """422 naming the first query parameter the request's endpoint does not take (see
    ``declared_query``), as an unknown field of a body is refused; nothing for an endpoint
    not in ``declared``."""
    known = declared.get(request.route_handler)
    if known is None or not request.scope["query_string"]:
        return
    for name in request.query_params:
        if name not in known:
            takes = ", ".join(sorted(known)) if known else "none"
            raise ClientException(
                status_code=422,
                detail=f"{name[:_SHOWN_NAME]}: unknown query parameter (this endpoint takes: "
                f"{takes})",
            )
