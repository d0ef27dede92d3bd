"""Readiness: can this deployment take and deliver notifications right now?

Three checks, each answered in plain words: Redis takes writes (a refusal — out of memory,
a read-only replica, still loading its data — means every ingest would fail), every
consumer group the workers and the projector read with exists (a missing one is made again
on the spot, as any reader that finds it gone does), and PostgreSQL answers for the read
side. Liveness is simpler: the process answers at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from streams.core.consumer_groups import ensure_all_groups, missing_groups
from streams.core.keys import KeySpace

log = structlog.get_logger(__name__)

PROBE_TTL_MS = 60_000
POSTGRES_TIMEOUT_S = 2.0
OK = "ok"


@dataclass(slots=True)
class Readiness:
    """Each check's answer: "ok", or what is wrong."""

    checks: dict[str, str] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return all(answer == OK for answer in self.checks.values())


# The read model's pool, or None while PostgreSQL cannot be reached.
PoolOf = Callable[[], Awaitable[asyncpg.Pool | None]]


async def readiness(redis: Redis, keys: KeySpace, read_model: PoolOf) -> Readiness:
    """Run every check; a check that cannot run says why instead."""
    result = Readiness()
    result.checks["redis"] = await _redis_writes(redis, keys)
    if result.checks["redis"] == OK:
        result.checks["consumer_groups"] = await _groups(redis, keys)
    else:
        result.checks["consumer_groups"] = "not checked: Redis is not usable"
    result.checks["postgresql"] = await _postgres(read_model)
    return result


async def _redis_writes(redis: Redis, keys: KeySpace) -> str:
    try:
        await redis.set(keys.write_probe, "1", px=PROBE_TTL_MS)
    except ResponseError as error:
        # OOM, READONLY, LOADING, MISCONF ...: Redis answers but takes no writes.
        return f"refuses writes: {_first_line(error)}"
    except (RedisError, OSError) as error:
        return f"unreachable ({type(error).__name__})"
    return OK


async def _groups(redis: Redis, keys: KeySpace) -> str:
    shards = keys.all_shards()
    try:
        missing = await missing_groups(redis, shards)
        if not missing:
            return OK
        log.warning("ready.groups_missing", missing=[f"{s} {g}" for s, g in missing])
        await ensure_all_groups(redis, shards)
    except (RedisError, OSError) as error:
        return f"cannot be read: {_first_line(error)}"
    names = ", ".join(f"{group!r} on {stream}" for stream, group in missing)
    return f"missing, made again now: {names}"


async def _postgres(read_model: PoolOf) -> str:
    pool = await read_model()
    if pool is None:
        return "unreachable: the read model cannot be queried"
    try:
        async with asyncio.timeout(POSTGRES_TIMEOUT_S):
            await pool.fetchval("SELECT 1")
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
        return f"unreachable ({type(error).__name__})"
    return OK


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:200]
