"""A bare Litestar endpoint doing one EVALSHA per request: the ceiling Clarion is compared to.

``bench/ingest.py`` runs it with uvicorn exactly as Clarion runs (``--factory``, uvloop,
httptools, no access log) and sends it the same requests, so the difference in throughput is
what Clarion's own work costs: auth, validation, fan-out, encoding and its larger Lua script.

Environment: ``BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) and
``BENCH_KEY_PREFIX`` (default ``bench``); keys are ``<prefix>:bare:...``. ``GET /v1/ops/health``
only tells the harness that a worker is up.
"""

from __future__ import annotations

import os
from typing import Any

from litestar import Litestar, Request, Response, get, post
from litestar.datastructures import State
from redis.asyncio import Redis

# Remember the key for a day like Clarion's idempotency record, then append the body to a stream.
SCRIPT = """
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', 86400000) then
  return redis.call('XADD', KEYS[2], '*', 'b', ARGV[1])
end
return false
"""
_JSON = "application/json"


@post("/v1/notifications", status_code=202)
async def ingest(request: Request[Any, Any, State]) -> Response[bytes]:
    """Store the raw body under the request's Idempotency-Key with one EVALSHA."""
    state = request.app.state
    body = await request.body()
    key = request.headers.get("idempotency-key", "")
    entry_id = await state.redis.evalsha(
        state.sha, 2, f"{state.prefix}:bare:idem:{key}", f"{state.prefix}:bare:events", body
    )
    if entry_id is None:
        return Response(b'{"detail":"duplicate"}', status_code=409, media_type=_JSON)
    return Response(b'{"id":"%s"}' % entry_id, status_code=202, media_type=_JSON)


@get("/v1/ops/health")
async def health() -> dict[str, str]:
    """Readiness for the benchmark harness, at the same path as Clarion's."""
    return {"status": "ok"}


def build() -> Litestar:
    """Build the app for uvicorn (``--factory``): one Redis client per worker process."""
    redis = Redis.from_url(
        os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"), max_connections=256
    )
    state = State({"redis": redis, "prefix": os.environ.get("BENCH_KEY_PREFIX", "bench")})

    async def load_script() -> None:
        state.sha = await redis.script_load(SCRIPT)

    async def close_redis() -> None:
        await redis.aclose()

    return Litestar(
        route_handlers=[ingest, health],
        state=state,
        on_startup=[load_script],
        on_shutdown=[close_redis],
        logging_config=None,
        debug=False,
    )
