"""The error answers handlers can give, named once so the OpenAPI schema documents them.

Every error body has Litestar's shape, ``{"status_code": …, "detail": "<what is wrong>"}``.
Handlers list what they may answer with ``raises=[...]``; Litestar turns that list into the
documented responses, so a client generated from ``/schema`` knows every status it can get.
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
