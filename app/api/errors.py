"""The error answers handlers can give, named once so the OpenAPI schema documents them,
and the one place where the domain's errors become status codes.

Every error body has Litestar's shape, ``{"status_code": …, "detail": "<what is wrong>"}``.
Handlers list what they may answer with ``raises=[...]``; Litestar turns that list into the
documented responses, so a client generated from ``/schema`` knows every status it can get.

The domain raises the kinds of ``streams.core.errors`` and knows no HTTP; ``STATUS_OF`` gives
each kind its status, and ``clarion_error`` answers any of them raised from a handler
(``Retry-After`` when the error says how long to wait). A ``ClarionError`` of no kind is a
fault of the server: a 500 that says nothing of it.
"""

from __future__ import annotations

from typing import Any

import structlog
from litestar import Request, Response
from litestar.datastructures import State
from litestar.exceptions import (
    ClientException,
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    ServiceUnavailableException,
    ValidationException,
)
from litestar.exceptions.responses import create_exception_response

from streams.core import errors
from streams.core.errors import ClarionError

log = structlog.get_logger(__name__)


class NotAuthorized(NotAuthorizedException):
    detail = "No valid API key in Authorization (Bearer <key>)"


class MissingScope(PermissionDeniedException):
    detail = "The API key lacks the scope this endpoint needs"


class NotFound(NotFoundException):
    detail = "No such resource, or one of another producer"


class KeyInFlight(ClientException):
    status_code = 409
    detail = "A request with this Idempotency-Key is still in flight; retry after Retry-After"


class BodyTooLarge(ClientException):
    status_code = 413
    detail = "The body is larger than the limit"


class NotJson(ClientException):
    status_code = 415
    detail = "The body must be declared Content-Type: application/json"


class OverQuota(ClientException):
    status_code = 429
    detail = "The producer is over its ingest quota; retry after Retry-After"


class TooManyStreams(ClientException):
    status_code = 429
    detail = "The recipient has as many inbox streams open as it may; retry after Retry-After"


class StreamsFull(ServiceUnavailableException):
    detail = "The server holds as many inbox streams as it may; retry after Retry-After"


class InvalidField(ClientException):
    status_code = 422
    detail = "A field or parameter is invalid; the detail names it"


class RedisUnavailable(ServiceUnavailableException):
    detail = "The event log (Redis) is unavailable; retry after Retry-After"


class ReadModelUnavailable(ServiceUnavailableException):
    detail = "The read model (PostgreSQL) is unavailable; retry shortly"


# What every authenticated endpoint may answer, besides its own codes.
# Litestar's own ValidationException documents 400 (broken JSON, a missing header); a class
# of our own for it would make the documented 400 body a oneOf that every body matches twice.
AUTHENTICATED: list[type[HTTPException]] = [
    ValidationException,
    NotAuthorized,
    MissingScope,
    InvalidField,
    RedisUnavailable,
]


# The status of each kind of error; every kind has one, and only this table says which.
STATUS_OF: dict[type[ClarionError], int] = {
    errors.Malformed: 400,
    errors.Unauthenticated: 401,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.TooLarge: 413,
    errors.Invalid: 422,
    errors.RateLimited: 429,
    errors.Unavailable: 503,
}


def status_of(error: ClarionError) -> int | None:
    """The status ``error`` is answered with; None for an error of no kind (a bug)."""
    kind = errors.kind_of(error)
    return None if kind is None else STATUS_OF[kind]


def retry_headers(error: ClarionError) -> dict[str, str] | None:
    """``Retry-After`` when ``error`` says how long to wait, else no header."""
    if error.retry_after_s is None:
        return None
    return {"Retry-After": str(error.retry_after_s)}


def as_http(error: ClarionError) -> HTTPException:
    """``error`` as the exception Litestar answers; a 500 without its message if of no kind."""
    status = status_of(error)
    if status is None:
        return HTTPException(status_code=500, detail="Internal Server Error")
    return HTTPException(status_code=status, detail=error.detail, headers=retry_headers(error))


def error_body(status_code: int, detail: str) -> dict[str, Any]:
    """The body of an error answer, as Litestar writes it for an exception."""
    return {"status_code": status_code, "detail": detail}


def clarion_error(request: Request[Any, Any, State], error: Exception) -> Response[Any]:
    """Answer a ``ClarionError`` raised from a handler as its kind says, exactly as Litestar
    answers an ``HTTPException`` of that status; one of no kind is a bug (``internal_error``)."""
    assert isinstance(error, ClarionError)
    if status_of(error) is None:
        return internal_error(request, error)
    return create_exception_response(request, as_http(error))


def redis_unavailable(request: Request[Any, Any, State], error: Exception) -> Response[Any]:
    """Redis, the event log, cannot be reached: nothing was accepted, the client may retry."""
    log.warning("http.redis_unavailable", path=request.url.path, error=type(error).__name__)
    return Response(
        {"status_code": 503, "detail": "the event log (Redis) is unavailable; retry shortly"},
        status_code=503,
        headers={"Retry-After": "1"},
    )


def internal_error(request: Request[Any, Any, State], error: Exception) -> Response[Any]:
    """Answer 500 without any internal detail; log a bug with its traceback.

    The path comes from the ASGI scope: ``request.url`` is built from the ``Host`` header,
    which a client may send as no URL can hold (a port past 65535), and would raise again.
    """
    if isinstance(error, HTTPException):
        # Raised on purpose by Litestar, e.g. when the client hung up mid-body: not a bug.
        log.info("http.aborted", path=request.scope["path"], detail=error.detail)
    else:
        log.error("http.unhandled_error", path=request.scope["path"], exc_info=error)
    return Response({"status_code": 500, "detail": "Internal Server Error"}, status_code=500)
