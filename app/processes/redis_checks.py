"""Start-up checks of the Redis server, or of every master of a Redis Cluster: reachable, new
enough, no eviction, durability; a cluster's node named as a single Redis is refused."""

from __future__ import annotations

from typing import Any

import structlog
from redis.asyncio import Redis, RedisCluster
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from streams.core.connection import redact
from streams.core.errors import ClarionError

log = structlog.get_logger(__name__)
MIN_VERSION = (7, 0)
DURABILITY_SETTINGS = ("maxmemory-policy", "appendonly", "appendfsync")


class RedisNotReady(ClarionError):
    """Redis cannot be used as Clarion's event log; the message says how to fix it."""


async def check_redis(redis: Redis | RedisCluster, url: str) -> str:
    """Check the server (every master of a cluster) and return the durability guarantee in
    plain words (a message names ``url`` without its password)."""
    if isinstance(redis, RedisCluster):
        return await _check_cluster(redis, url)
    try:
        info = await redis.info("server")
    except (RedisError, OSError) as error:
        raise RedisNotReady(f"Redis at {redact(url)} is not reachable: {error}") from None
    if _text(info.get("redis_mode", "standalone")) == "cluster":
        # Only the node's own slots would be served: every other key answered MOVED.
        raise RedisNotReady(
            f"Redis at {redact(url)} is a node of a Redis Cluster: name the cluster in "
            "CLARION_REDIS_URL as redis+cluster://host:port,host:port (any of its nodes)"
        )
    _check_version(info, redact(url))
    try:
        config = await _durability_settings(redis)
    except ResponseError:
        return _unknown_durability()
    except (RedisError, OSError) as error:  # it went away (or stalled) since INFO answered
        raise RedisNotReady(f"Redis at {redact(url)} is not reachable: {error}") from None
    guarantee = _durability_of(config)
    log.info("redis.durability", redis_version=_text(info["redis_version"]), guarantee=guarantee)
    return guarantee


async def _check_cluster(cluster: RedisCluster, url: str) -> str:
    """Every master: the version, no eviction, and one durability guarantee for them all
    (the weakest, when they differ)."""
    try:
        await cluster.initialize()  # every slot must have a master (full coverage)
        masters = cluster.get_primaries()
        infos = [await cluster.info("server", target_nodes=node) for node in masters]
    except (RedisError, RedisClusterException, OSError) as error:
        raise RedisNotReady(
            f"the Redis Cluster at {redact(url)} is not reachable or not ready: {error}"
        ) from None
    guarantees: dict[str, list[str]] = {}
    for node, info in zip(masters, infos, strict=True):
        _check_version(info, f"the cluster's node {node.name}")
        try:
            config = await _durability_settings(cluster, target_nodes=node)
        except ResponseError:
            return _unknown_durability()
        except (RedisError, RedisClusterException, OSError) as error:  # restarting, say
            raise RedisNotReady(
                f"the Redis Cluster at {redact(url)} is not reachable or not ready: {error}"
            ) from None
        guarantee = _durability_of(config, where=f" on the cluster's node {node.name}")
        guarantees.setdefault(guarantee, []).append(node.name)
    weakest = min(guarantees, key=GUARANTEES_WEAKEST_FIRST.index)
    if len(guarantees) > 1:
        weakest = f"{weakest} (on {', '.join(guarantees[weakest])}; the nodes differ)"
    log.info("redis.durability", masters=len(masters), guarantee=weakest)
    return weakest


async def _durability_settings(redis: Redis | RedisCluster, **target: Any) -> dict[Any, Any]:
    """The settings the durability depends on, as CONFIG GET answers them (of one node of a
    cluster: ``target_nodes``)."""
    config: dict[Any, Any] = {}
    for name in DURABILITY_SETTINGS:
        config |= await redis.config_get(name, **target)
    return config


def _check_version(info: dict[str, Any], where: str) -> None:
    version = _text(info.get("redis_version", "0"))
    if tuple(int(part) for part in version.split(".")[:2]) < MIN_VERSION:
        raise RedisNotReady(
            f"Redis {version} ({where}) is too old: Clarion needs Redis 7.0 or newer"
        )


def _durability_of(config: dict[Any, Any], where: str = "") -> str:
    """Refuse an evicting policy; the guarantee the AOF settings give."""
    values = {_text(k): _text(v) for k, v in config.items() if isinstance(v, bytes | str)}
    policy = values.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        raise RedisNotReady(
            f"Redis maxmemory-policy is {policy!r}{where}: it may evict accepted "
            "notifications. Set it to noeviction (redis.conf 'maxmemory-policy noeviction' "
            "or 'CONFIG SET maxmemory-policy noeviction')."
        )
    return durability(values.get("appendonly", "no"), values.get("appendfsync", "everysec"))


def _unknown_durability() -> str:
    # Managed services often rename CONFIG; nothing can be verified then.
    guarantee = "unknown: CONFIG is not available, so the AOF settings cannot be read"
    log.warning("redis.durability", guarantee=guarantee)
    return guarantee


NO_AOF = (
    "no AOF: notifications accepted since the last snapshot are lost if Redis stops "
    "(turn on appendonly for production)"
)
NO_FSYNC = "AOF without fsync: a crash can lose what the OS had not yet written (tens of seconds)"
FSYNC_EVERYSEC = "AOF fsync everysec: a crash can lose up to 1 s of accepted notifications"
FSYNC_ALWAYS = "AOF fsync always: no accepted notification is lost on a crash"
GUARANTEES_WEAKEST_FIRST = (NO_AOF, NO_FSYNC, FSYNC_EVERYSEC, FSYNC_ALWAYS)


def durability(appendonly: str, appendfsync: str) -> str:
    """The acknowledgement guarantee that Redis's AOF settings give, in plain words."""
    if appendonly != "yes":
        return NO_AOF
    if appendfsync == "always":
        return FSYNC_ALWAYS
    if appendfsync == "everysec":
        return FSYNC_EVERYSEC
    return NO_FSYNC


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
