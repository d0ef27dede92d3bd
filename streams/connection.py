"""The Redis client Clarion uses: redis-py's asyncio client, packing commands in C.

redis-py's synchronous client packs commands with hiredis, but its asyncio connection packs
them in Python, at about a microsecond per argument; an ingest script call has hundreds of
arguments. This connection class packs with hiredis, like the synchronous client (Clarion
only sends str, bytes and int arguments, which hiredis packs as redis-py would).
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import Connection
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
    """A client for ``url``; plain TCP URLs get the hiredis-packing connection."""
    if HIREDIS_AVAILABLE and url.startswith("redis://"):
        options.setdefault("connection_class", HiredisPackingConnection)
    return Redis.from_url(url, **options)


def being_cancelled() -> bool:
    """Whether the running task has been asked to stop.

    A cancellation that interrupts a command may come out of the client as an error of its
    own (a connection error), not as ``CancelledError``: a loop that retries on errors must
    ask this before it goes on, or a stopping process waits for it for ever.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
