"""The providers of a catalog, each built by the adapter of its kind."""

from __future__ import annotations

from redis.asyncio import Redis

from app.catalog import Catalog
from app.providers.base import Provider
from app.providers.sandbox import REMEMBER_MS, SandboxProvider
from streams.keys import KeySpace


def build_providers(
    catalog: Catalog, redis: Redis, keys: KeySpace, *, remember_ms: int = REMEMBER_MS
) -> dict[str, Provider]:
    """One adapter per provider of the catalog; a sandbox remembers a send for
    ``remember_ms`` (the stream retention: as long as its record keeps the send)."""
    providers: dict[str, Provider] = {}
    for name, config in catalog.providers.items():
        # "sandbox" is the only kind so far; the catalog refuses any other.
        providers[name] = SandboxProvider(
            redis, keys, idempotent=config.idempotent, name=name, remember_ms=remember_ms
        )
    return providers
