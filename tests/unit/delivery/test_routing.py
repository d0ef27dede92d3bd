"""Which provider an attempt goes to, on fakeredis: the channel's failover order, passing over
open circuits, one probe of a half-open one, waiting when every circuit is open, and each
provider's bulkhead."""

from __future__ import annotations

import asyncio
import time

import msgspec
from redis.asyncio import Redis

from app.catalog import Catalog, parse_catalog
from app.delivery.routing import Bulkheads, Router, circuit_policies
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel
from streams.delivery.circuit_breaker import CircuitBreakers
from streams.delivery.work_items import WorkItem
from tests.unit.delivery_examples import ITEM

CATALOG = """
[providers.primary]
kind = "sandbox"
max_in_flight = 2
circuit = { enabled = true, min_calls = 4, failure_share = 0.5, open_seconds = 0.2 }

[providers.backup]
kind = "sandbox"
circuit = { enabled = true, min_calls = 4, failure_share = 0.5, open_seconds = 60 }

[providers.plain]
kind = "sandbox"

[channels.SMS]
providers = ["primary", "backup"]

[channels.EMAIL]
provider = "plain"

[types.otp]
channels = ["SMS", "EMAIL"]
priority = "HIGH"
ttl_seconds = 300
opt_out = false

[types.otp.templates.en]
SMS = { body = "code" }
EMAIL = { title = "code", body = "code" }
"""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def router(fake: Redis, catalog: Catalog, key_prefix: str) -> tuple[Router, CircuitBreakers]:
    breakers = CircuitBreakers(fake, KeySpace(key_prefix), circuit_policies(catalog))
    bounds = {name: config.max_in_flight for name, config in catalog.providers.items()}
    return Router(catalog, breakers, Bulkheads(bounds)), breakers


async def fail(breakers: CircuitBreakers, provider: str) -> None:
    for _ in range(4):
        breakers.record(provider, failed=True)
    await breakers.report()


async def test_a_delivery_goes_to_the_first_provider_then_round_its_list(
    fake: Redis, key_prefix: str
) -> None:
    routes, _ = router(fake, parse_catalog(CATALOG), key_prefix)
    assert (await routes.route(ITEM, now_ms())).provider == "primary"
    moved = msgspec.structs.replace(ITEM, failover=1)
    assert (await routes.route(moved, now_ms())).provider == "backup"
    again = msgspec.structs.replace(ITEM, failover=2)
    assert (await routes.route(again, now_ms())).provider == "primary"
    email = msgspec.structs.replace(ITEM, channel=Channel.EMAIL)
    assert (await routes.route(email, now_ms())).provider == "plain"


async def test_an_open_circuit_is_passed_over_and_all_open_means_waiting(
    fake: Redis, key_prefix: str
) -> None:
    routes, breakers = router(fake, parse_catalog(CATALOG), key_prefix)
    await fail(breakers, "primary")
    assert (await routes.route(ITEM, now_ms())).provider == "backup"
    await fail(breakers, "backup")
    route = await routes.route(ITEM, now_ms())
    assert (route.provider, route.reason) == ("", "circuit_open")
    # It waits for the first circuit that may be probed (primary's, 0.2 s), not for backup.
    assert route.until_ms <= breakers.circuit("primary").until_ms + 250


async def test_a_half_open_circuit_gets_one_probe_and_the_rest_wait(
    fake: Redis, key_prefix: str
) -> None:
    routes, breakers = router(fake, parse_catalog(CATALOG), key_prefix)
    await fail(breakers, "primary")
    await fail(breakers, "backup")
    await asyncio.sleep(0.25)
    probe = await routes.route(ITEM, now_ms())
    assert (probe.provider, probe.probe) == ("primary", True)
    waiting = await routes.route(ITEM, now_ms())
    assert (waiting.provider, waiting.reason) == ("", "circuit_open")
    routes.done("primary")
    await breakers.probe_done("primary", ok=True)
    assert (await routes.route(ITEM, now_ms())).provider == "primary"


async def test_a_full_bulkhead_makes_deliveries_wait_not_fail_over(
    fake: Redis, key_prefix: str
) -> None:
    routes, _ = router(fake, parse_catalog(CATALOG), key_prefix)
    first, second = await routes.route(ITEM, now_ms()), await routes.route(ITEM, now_ms())
    assert (first.provider, second.provider) == ("primary", "primary")
    now = now_ms()
    full = await routes.route(ITEM, now)
    assert (full.provider, full.reason) == ("", "bulkhead_full")
    assert now + 1000 <= full.until_ms < now + 1500
    routes.done("primary")
    assert (await routes.route(ITEM, now_ms())).provider == "primary"


def test_providers_without_a_bound_have_no_bulkhead() -> None:
    bulkheads = Bulkheads({"bounded": 1, "free": 0})
    assert bulkheads.try_enter("free")
    assert bulkheads.try_enter("free")
    assert bulkheads.try_enter("bounded")
    assert not bulkheads.try_enter("bounded")
    bulkheads.leave("bounded")
    assert bulkheads.try_enter("bounded")


PUSH_CATALOG = """
[providers.fcm]
kind = "fcm"
project_id = "clarion-test"
service_account_env = "FCM_ACCOUNT"

[providers.apns]
kind = "apns"
team_id = "TEAM123456"
key_id = "KEY1234567"
key_env = "APNS_KEY"
topic = "com.example.app"
circuit = { enabled = true, min_calls = 4, failure_share = 0.5, open_seconds = 60 }

[providers.apns_backup]
kind = "sandbox"

[channels.PUSH]
platforms = { fcm = ["fcm"], apns = ["apns", "apns_backup"] }

[types.news]
channels = ["PUSH"]
priority = "LOW"
ttl_seconds = 3600
opt_out = true

[types.news.templates.en]
PUSH = { title = "News", body = "Hello" }
"""


async def test_each_push_target_goes_to_its_platforms_providers(
    fake: Redis, key_prefix: str
) -> None:
    routes, breakers = router(fake, parse_catalog(PUSH_CATALOG), key_prefix)

    def push(address: str) -> WorkItem:
        return msgspec.structs.replace(ITEM, channel=Channel.PUSH, address=address)

    assert (await routes.route(push("plain-token"), now_ms())).provider == "fcm"
    assert (await routes.route(push("fcm t"), now_ms())).provider == "fcm"
    apns = push("apns " + "a1" * 32)
    assert (await routes.route(apns, now_ms())).provider == "apns"
    await fail(breakers, "apns")
    assert (await routes.route(apns, now_ms())).provider == "apns_backup"
    # Web Push has no provider here (ingest suppresses such targets; one queued before the
    # catalog changed waits for a provider to come back).
    route = await routes.route(push("webpush https://p.example/x k a"), now_ms())
    assert (route.provider, route.reason) == ("", "no_provider")
