"""The Redis client each kind of Clarion process uses (bytes in, bytes out)."""

from __future__ import annotations

from redis.asyncio import Redis

from app.settings import Settings
from streams.core.connection import connect


def redis_client(settings: Settings) -> Redis:
    """A client sized for many concurrent requests; bytes in, bytes out."""
    return connect(settings.redis_url, max_connections=256, health_check_interval=30)
