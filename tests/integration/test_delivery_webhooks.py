"""The WEBHOOK channel end to end, against real Redis and the local receiver (which verifies
every signature with the standardwebhooks library): a notification reaches the recipient's
URL signed, with its delivery id as webhook-id; a URL into a private network fails for good
without a call; a 410 marks the URL dead, so the next notification to it is suppressed."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
from redis.asyncio import Redis

from app.catalog import Catalog, parse_catalog
from streams.core.keys import KeySpace
from tests.integration.delivery_support import accept, running_worker, state, wait_until
from tests.peers.webhook import Answer, Receiver, Served, serve

SECRET = "whsec_" + base64.b64encode(b"clarion-webhook-test-key-32-byte").decode()

CATALOG = """
[providers.hooks]
kind = "webhook"
secret_env = "TEST_WEBHOOK_SECRET"
allow_http_hosts = ["127.0.0.1"]
{networks}

[channels.WEBHOOK]
provider = "hooks"
retry = {{ base_seconds = 0.05, max_seconds = 0.1, max_attempts = 3 }}

[types.order_shipped]
channels = ["WEBHOOK"]
priority = "NORMAL"
ttl_seconds = 300
opt_out = true

[types.order_shipped.templates.en]
WEBHOOK = {{ body = '{{"event": "order_shipped", "order": {{{{ order|tojson }}}}}}' }}
"""


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)


@pytest.fixture
def receiver() -> Iterator[Served]:
    with serve(Receiver(SECRET)) as served:
        yield served


def catalog(*, loopback_allowed: bool) -> Catalog:
    networks = 'allow_networks = ["127.0.0.0/8"]' if loopback_allowed else ""
    return parse_catalog(CATALOG.format(networks=networks))


def shipped(url: str, order: str = "A-17") -> dict[str, object]:
    return {"recipient": {"id": "u-1", "webhook_url": url}, "type": "order_shipped",
            "data": {"order": order}}  # fmt: skip


async def test_a_webhook_arrives_signed_with_the_delivery_id(
    real_redis: Redis, key_prefix: str, receiver: Served
) -> None:
    keys, hooks = KeySpace(key_prefix), catalog(loopback_allowed=True)
    async with running_worker(real_redis, keys, hooks):
        answer = await accept(real_redis, keys, hooks, shipped(receiver.url("/hooks/u-1")), "w1")
        [delivery] = answer["deliveries"]

        async def sent() -> bool:
            return (await state(real_redis, keys, delivery["id"])).get("status") == "SENT"

        await wait_until(sent)
    [attempt] = receiver.receiver.attempts  # verified by the receiver, or it would be absent
    assert attempt.path == "/hooks/u-1"
    assert attempt.webhook_id == delivery["id"]
    assert json.loads(attempt.body) == {"event": "order_shipped", "order": "A-17"}
    assert (await state(real_redis, keys, delivery["id"]))["provider"] == "hooks"


async def test_a_url_into_a_private_network_fails_without_a_call(
    real_redis: Redis, key_prefix: str, receiver: Served
) -> None:
    keys, hooks = KeySpace(key_prefix), catalog(loopback_allowed=False)
    async with running_worker(real_redis, keys, hooks):
        answer = await accept(real_redis, keys, hooks, shipped(receiver.url("/x")), "w2")
        [delivery] = answer["deliveries"]

        async def failed() -> bool:
            return (await state(real_redis, keys, delivery["id"])).get("status") == "FAILED"

        await wait_until(failed)
    recorded = await state(real_redis, keys, delivery["id"])
    assert (recorded["error_class"], recorded["attempts"]) == ("PERMANENT", "1")
    assert recorded["last_error"].startswith("rejected: ")
    assert "loopback" in recorded["last_error"]
    assert receiver.receiver.attempts == []


async def test_a_gone_url_is_remembered_dead_and_later_notifications_suppressed(
    real_redis: Redis, key_prefix: str, receiver: Served
) -> None:
    keys, hooks = KeySpace(key_prefix), catalog(loopback_allowed=True)
    url = receiver.url("/gone")
    receiver.receiver.script("/gone", Answer(status=410))
    async with running_worker(real_redis, keys, hooks):
        answer = await accept(real_redis, keys, hooks, shipped(url), "w3")
        [delivery] = answer["deliveries"]

        async def failed() -> bool:
            return (await state(real_redis, keys, delivery["id"])).get("status") == "FAILED"

        await wait_until(failed)
        later = await accept(real_redis, keys, hooks, shipped(url, "A-18"), "w4")
    recorded = await state(real_redis, keys, delivery["id"])
    assert recorded["last_error"].startswith("invalid_address: ")
    [suppressed] = later["deliveries"]
    assert (suppressed["status"], suppressed["reason"]) == ("SUPPRESSED", "invalid_address")
