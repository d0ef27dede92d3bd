"""Start-up checks of the Redis server: reachable, new enough, not a cluster's node, no
eviction, durability."""

from __future__ import annotations

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from streams.connection import redact

log = structlog.get_logger(__name__)
MIN_VERSION = (7, 0)


class RedisNotReady(Exception):
    """Redis cannot be used as Clarion's event log; the message says how to fix it."""


async def check_redis(redis: Redis, url: str) -> str:
    """Check the server and return the durability guarantee in plain words (a message
    names ``url`` without its password)."""
    try:
        info = await redis.info("server")
    except (RedisError, OSError) as error:
        raise RedisNotReady(f"Redis at {redact(url)} is not reachable: {error}") from None
    version = str(info.get("redis_version", "0"))
    if tuple(int(part) for part in version.split(".")[:2]) < MIN_VERSION:
        raise RedisNotReady(f"Redis {version} is too old: Clarion needs Redis 7.0 or newer")
    if _text(info.get("redis_mode", "standalone")) == "cluster":
        # Its keys and scripts are laid out for a cluster, its client is not yet: the keys of
        # another node's slots would be answered MOVED, some processes running and some not.
        raise RedisNotReady(
            f"Redis at {redact(url)} is a node of a Redis Cluster, and Clarion does not route "
            "commands to a cluster's nodes yet: point CLARION_REDIS_URL at a standalone Redis "
            "(a primary, with replicas if wanted)"
        )
    try:
        config = await redis.config_get("maxmemory-policy")
        config |= await redis.config_get("appendonly")
        config |= await redis.config_get("appendfsync")
    except ResponseError:
        # Managed services often rename CONFIG; nothing can be verified then.
        guarantee = "unknown: CONFIG is not available, so the AOF settings cannot be read"
        log.warning("redis.durability", guarantee=guarantee)
        return guarantee
    values = {_text(k): _text(v) for k, v in config.items() if isinstance(v, bytes | str)}
    policy = values.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        raise RedisNotReady(
            f"Redis maxmemory-policy is {policy!r}: it may evict accepted notifications. "
            "Set it to noeviction (redis.conf 'maxmemory-policy noeviction' or "
            "'CONFIG SET maxmemory-policy noeviction')."
        )
    guarantee = durability(values.get("appendonly", "no"), values.get("appendfsync", "everysec"))
    log.info("redis.durability", redis_version=version, guarantee=guarantee)
    return guarantee


def durability(appendonly: str, appendfsync: str) -> str:
    """The acknowledgement guarantee that Redis's AOF settings give, in plain words."""
    if appendonly != "yes":
        return (
            "no AOF: notifications accepted since the last snapshot are lost if Redis stops "
            "(turn on appendonly for production)"
        )
    if appendfsync == "always":
        return "AOF fsync always: no accepted notification is lost on a crash"
    if appendfsync == "everysec":
        return "AOF fsync everysec: a crash can lose up to 1 s of accepted notifications"
    return "AOF without fsync: a crash can lose what the OS had not yet written (tens of seconds)"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
