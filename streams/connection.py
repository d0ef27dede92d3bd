"""The Redis client Clarion uses: redis-py's asyncio client, packing commands in C.

redis-py's synchronous client packs commands with hiredis, but its asyncio connection packs
them in Python, at about a microsecond per argument; an ingest script call has hundreds of
arguments. This connection class uses the same hiredis packer as the synchronous client.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.connection import HiredisRespSerializer
from redis.utils import HIREDIS_AVAILABLE


class HiredisPackingConnection(Connection):
    """A TCP connection whose commands are packed by hiredis."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        packed: list[bytes] = self._packer.pack(*args)
        return packed


def connect(url: str, **options: Any) -> Redis:
    """A client for ``url``; plain TCP URLs get the hiredis-packing connection."""
    if HIREDIS_AVAILABLE and url.startswith("redis://"):
        options.setdefault("connection_class", HiredisPackingConnection)
    return Redis.from_url(url, **options)
