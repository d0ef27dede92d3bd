"""Operational endpoints."""

from __future__ import annotations

from typing import Any

import structlog
from litestar import Request, Response, get
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from redis.asyncio import Redis
from redis.exceptions import RedisError

log = structlog.get_logger(__name__)


@get("/v1/ops/health")
async def health(request: Request[Any, Any, State]) -> dict[str, Any]:
    """Liveness and Redis reachability; no key needed, nothing sensitive in it."""
    redis: Redis = request.app.state.redis
    try:
        await redis.ping()
        redis_state = "ok"
    except (RedisError, OSError):
        redis_state = "unreachable"
    return {"status": "ok" if redis_state == "ok" else "degraded", "redis": redis_state}


def redis_unavailable(request: Request[Any, Any, State], error: Exception) -> Response[Any]:
    """Redis, the event log, cannot be reached: nothing was accepted, the client may retry."""
    log.warning("http.redis_unavailable", path=request.url.path, error=type(error).__name__)
    return Response(
        {"status_code": 503, "detail": "the event log (Redis) is unavailable; retry shortly"},
        status_code=503,
        headers={"Retry-After": "1"},
    )


def internal_error(request: Request[Any, Any, State], error: Exception) -> Response[Any]:
    """Answer 500 without any internal detail; log a bug with its traceback."""
    if isinstance(error, HTTPException):
        # Raised on purpose by Litestar, e.g. when the client hung up mid-body: not a bug.
        log.info("http.aborted", path=request.url.path, detail=error.detail)
    else:
        log.error("http.unhandled_error", path=request.url.path, exc_info=error)
    return Response({"status_code": 500, "detail": "Internal Server Error"}, status_code=500)
