"""The Redis client Clarion uses: redis-py's asyncio client, packing commands in C.

redis-py's synchronous client packs commands with hiredis, but its asyncio connection packs
them in Python, at about a microsecond per argument; an ingest script call has hundreds of
arguments. This connection class packs with hiredis, like the synchronous client (Clarion
only sends str, bytes and int arguments, which hiredis packs as redis-py would).
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import Redis
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
