"""The providers of a catalog, on fakeredis: one adapter per provider, configured as the
catalog says."""

from __future__ import annotations

from redis.asyncio import Redis

from app.catalog import parse_catalog
from app.inbox.provider import InboxProvider
from app.providers.base import Message
from app.providers.registry import build_providers
from app.providers.sandbox import SandboxProvider
from streams.core.keys import KeySpace
from tests.conftest import REPO

TWO_PROVIDERS = (
    (REPO / "clarion.toml").read_text()
    + """
[providers.plain]
kind = "sandbox"
idempotent = false
"""
)


def message(attempt: int) -> Message:
    return Message(delivery_id="d-1", idempotency_key="d-1", channel="EMAIL",
                   address="jane@example.com", title="t", body="b", attempt=attempt)  # fmt: skip


async def test_each_provider_of_the_catalog_gets_its_adapter_under_its_name(
    fake: Redis, key_prefix: str
) -> None:
    catalog = parse_catalog(TWO_PROVIDERS, "two.toml")
    providers = build_providers(catalog, fake, KeySpace(key_prefix))
    assert set(providers) == {"sandbox", "plain", "inbox"}
    for name, provider in providers.items():
        kind = InboxProvider if name == "inbox" else SandboxProvider
        assert isinstance(provider, kind)
        assert provider.name == name


async def test_an_adapter_keeps_its_providers_idempotency(fake: Redis, key_prefix: str) -> None:
    providers = build_providers(
        parse_catalog(TWO_PROVIDERS, "two.toml"), fake, KeySpace(key_prefix)
    )
    idempotent, plain = providers["sandbox"], providers["plain"]
    assert await idempotent.send(message(1)) == await idempotent.send(message(2))
    assert await plain.send(message(1)) != await plain.send(message(2))


async def test_a_send_is_remembered_as_long_as_asked(fake: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    catalog = parse_catalog(TWO_PROVIDERS, "two.toml")
    await build_providers(catalog, fake, keys, remember_ms=60_000)["sandbox"].send(message(1))
    assert 0 < await fake.pttl(keys.sandbox_done("d-1")) <= 60_000
