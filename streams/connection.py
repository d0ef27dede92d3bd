"""The Redis client Clarion uses: redis-py's asyncio client, packing commands in C.

redis-py's synchronous client packs commands with hiredis, but its asyncio connection packs
them in Python, at about a microsecond per argument; an ingest script call has hundreds of
arguments. This connection class packs with hiredis, like the synchronous client (Clarion
only sends str, bytes and int arguments, which hiredis packs as redis-py would).

``connect_cluster`` makes a Redis Cluster client, and ``queue_clock``/``clock_ms`` read the
Redis clock in a way a cluster's client can send.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    import hiredis


class HiredisPackingConnection(Connection):
    """A TCP connection whose commands are packed by hiredis."""

    def pack_command(self, *args: Any) -> list[bytes]:
        # redis-py passes some commands as one "WORD WORD" first argument.
        name = args[0]
        if isinstance(name, str) and " " in name:
            args = (*name.split(), *args[1:])
        return [hiredis.pack_command(args)]


def connect(url: str, **options: Any) -> Redis:
    """A client for ``url``; plain TCP URLs get the hiredis-packing connection.

    A command that finds its pooled connection closed (Redis restarted since it was last
    used) is sent once more on a new one. A client made from a URL otherwise retries
    nothing, so after a restart every pooled connection failed its next command, however
    long afterwards: a worker lost the outcome of a send it had made, and sent it again. A
    call repeated after it did run once is harmless here: the scripts are idempotent
    (ingest by its idempotency record, outcomes by the version they expect).
    """
    if HIREDIS_AVAILABLE and url.startswith("redis://"):
        options.setdefault("connection_class", HiredisPackingConnection)
    options.setdefault("retry", Retry(NoBackoff(), 1))
    options.setdefault("retry_on_error", [ConnectionError])
    return Redis.from_url(url, **options)


def being_cancelled() -> bool:
    """Whether the running task has been asked to stop.

    A cancellation that interrupts a command may come out of the client as an error of its
    own (a connection error), not as ``CancelledError``: a loop that retries on errors must
    ask this before it goes on, or a stopping process waits for it for ever.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def redact(url: str) -> str:
    """``url`` without its password (in the user part or a ``password=`` query parameter):
    what an error message or a log line may show of a Redis or PostgreSQL URL."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}@{hosts}" if user else hosts
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, v) for k, v in pairs if k.lower() != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def connect_cluster(url: str, **options: Any) -> RedisCluster:
    """A Redis Cluster client for ``redis+cluster://[user:password@]host:port,host:port``
    (``rediss+cluster://`` for TLS): any of the nodes, the client finds the others.

    The streams layer's calls work through it: every script call names its keys, and the
    keys of one call share a hash tag. The service's processes do not run on a cluster yet
    (``app.processes.redis_checks`` refuses one).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("redis+cluster", "rediss+cluster"):
        raise ValueError(f"a cluster URL starts with redis+cluster://, got {redact(url)!r}")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes = []
    for address in hosts.split(","):
        host, _, port = address.rpartition(":")
        nodes.append(ClusterNode(host, int(port)))
    if userinfo:
        user, _, password = userinfo.partition(":")
        options.setdefault("username", unquote(user) or None)
        options.setdefault("password", unquote(password) or None)
    return RedisCluster(startup_nodes=nodes, ssl=parts.scheme == "rediss+cluster", **options)


# The Redis clock through the node holding a key: TIME names no key, so a cluster's client
# could not send it, and every node of a cluster has a clock of its own.
_CLOCK = "return redis.call('TIME')"


def queue_clock(pipe: Any, key: str) -> None:
    """Queue a read of the Redis clock on ``pipe``, on the node that holds ``key``; its
    reply is ``[seconds, microseconds]``, as TIME's."""
    pipe.eval(_CLOCK, 1, key)


def clock_reply_ms(reply: Any) -> int:
    """A reply of TIME (or of ``queue_clock``), ``[seconds, microseconds]``, in ms."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


async def clock_ms(redis: Redis, key: str) -> int:
    """The Redis clock in ms, on the node that holds ``key``."""
    return clock_reply_ms(await redis.eval(_CLOCK, 1, key))
