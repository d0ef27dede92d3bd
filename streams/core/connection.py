"""The Redis client Clarion uses: redis-py's asyncio client, packing commands in C.

redis-py's synchronous client packs commands with hiredis, but its asyncio connection packs
them in Python, at about a microsecond per argument; an ingest script call has hundreds of
arguments. This connection class packs with hiredis, like the synchronous client (Clarion
only sends str, bytes and int arguments, which hiredis packs as redis-py would).

``connect`` makes a Redis Cluster client for a ``redis+cluster://`` URL (``connect_cluster``),
and ``queue_clock``/``clock_ms`` read the Redis clock in a way a cluster's client can send.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from redis import Redis as SyncRedis
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import Connection, SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode as SyncClusterNode
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.exceptions import ConnectionError
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    import hiredis


class _FailsAsClosed(Connection):
    """A connection on which a command that finds it closed under it fails as a
    ``ConnectionError``.

    A connection can be closed while a command is on its way: redis-py's cluster client,
    when a command to a node fails to connect, closes that node's idle connections, one of
    which another task may have just taken; and a Redis that dies just after accepting a
    connection closes it while the handshake is sent. The command then meets a missing
    socket writer (``AttributeError``) or a closed transport (uvloop's ``RuntimeError``),
    which no handler of Redis errors catches: they ended a worker and a projector when Redis
    or a master was killed. As a ``ConnectionError`` it is retried like any lost connection
    (a cluster's client first asks the cluster which node serves the slot).
    """

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        try:
            await super().send_packed_command(command, check_health)
        except (AttributeError, RuntimeError) as error:
            raise ConnectionError(f"connection to {self.host}:{self.port} closed") from error


class HiredisPackingConnection(_FailsAsClosed):
    """A TCP connection whose commands are packed by hiredis."""

    def pack_command(self, *args: Any) -> list[bytes]:
        # redis-py passes some commands as one "WORD WORD" first argument.
        name = args[0]
        if isinstance(name, str) and " " in name:
            args = (*name.split(), *args[1:])
        return [hiredis.pack_command(args)]


class TlsClusterNodeConnection(_FailsAsClosed, SSLConnection):
    """A TLS connection to a cluster's node."""


CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://host:port,...``)."""
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def connect(url: str, **options: Any) -> Redis:
    """A client for ``url``; plain TCP URLs get the hiredis-packing connection, a
    ``redis+cluster://`` URL a cluster's client (``connect_cluster``).

    A command that finds its pooled connection closed (Redis restarted since it was last
    used) is sent once more on a new one. A client made from a URL otherwise retries
    nothing, so after a restart every pooled connection failed its next command, however
    long afterwards: a worker lost the outcome of a send it had made, and sent it again. A
    call repeated after it did run once is harmless here: the scripts are idempotent
    (ingest by its idempotency record, outcomes by the version they expect).

    A cluster's client is typed as a ``Redis``: it answers every command Clarion sends as a
    Redis does (every script call names its keys, and they share one hash tag; the
    integration and end-to-end suites run on a cluster). Its own retry policy stays: it
    retries a command on a connection error with backoff, after asking the cluster which
    node now holds the slot (a failover).
    """
    if is_cluster_url(url):
        options.pop("retry", None)
        return cast(Redis, connect_cluster(url, **options))
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

    ``max_connections`` bounds the connections to each node. A call whose keys span hash slots
    is refused by the client before it is sent.
    """
    nodes = [ClusterNode(host, port) for host, port in cluster_nodes(url)]
    tls = _with_credentials(url, options)
    client = RedisCluster(startup_nodes=nodes, ssl=tls, **options)
    # RedisCluster takes no connection class: nodes it learns of later are made from these
    # keyword arguments, and the start-up nodes were made already.
    kind: type[Connection] = TlsClusterNodeConnection if tls else HiredisPackingConnection
    if not HIREDIS_AVAILABLE and not tls:
        kind = _FailsAsClosed
    client.nodes_manager.connection_kwargs["connection_class"] = kind
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = kind
    return client


def connect_sync(url: str) -> SyncRedis:
    """A synchronous client for ``url``, a cluster's for ``redis+cluster://`` (typed as a
    ``Redis`` as ``connect``'s is): for tools and tests that run no event loop."""
    if not is_cluster_url(url):
        return SyncRedis.from_url(url)
    options: dict[str, Any] = {}
    tls = _with_credentials(url, options)
    # redis-py leaves the synchronous ClusterNode untyped.
    nodes = [SyncClusterNode(host, port) for host, port in cluster_nodes(url)]  # type: ignore[no-untyped-call]
    return cast(SyncRedis, SyncRedisCluster(startup_nodes=nodes, ssl=tls, **options))


def _with_credentials(url: str, options: dict[str, Any]) -> bool:
    """Put a cluster URL's user and password into ``options`` (unless given); whether it
    asks for TLS."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        user, _, password = userinfo.partition(":")
        options.setdefault("username", unquote(user) or None)
        options.setdefault("password", unquote(password) or None)
    return parts.scheme == "rediss+cluster"


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The ``host:port`` pairs a cluster URL names; ValueError (naming the URL without its
    password) when it is not one."""
    parts = urlsplit(url)
    if parts.scheme not in CLUSTER_SCHEMES:
        raise ValueError(f"a cluster URL starts with redis+cluster://, got {redact(url)!r}")
    if parts.path not in ("", "/", "/0") or parts.query:
        raise ValueError(
            f"a cluster URL names only nodes (a cluster has one database), got {redact(url)!r}"
        )
    nodes = []
    for address in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"a cluster URL names its nodes as host:port,host:port, got {redact(url)!r}"
            )
        nodes.append((host, int(port)))
    return nodes


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
