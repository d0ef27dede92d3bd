"""One producer's sender against a real receiver (tests/peers/webhook.py, every signature
verified with ``standardwebhooks``): in order per delivery, exactly once while nothing
crashes, through a receiver that fails for a while, given up into dead letters with why,
in batches when asked, and stopped without losing a POST in flight."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager

import msgspec
import pytest
from redis.asyncio import Redis

from app.catalog import parse_catalog
from app.catalog.status_webhooks import StatusWebhooksConfig
from app.status_webhooks.endpoint import Endpoint
from app.status_webhooks.sender import Sender
from streams.core.keys import KeySpace
from streams.status_webhooks.outbox import DueStatus, append_statuses, read_dead_letters
from streams.status_webhooks.store import StatusWebhookStore
from tests.integration.delivery_support import wait_until
from tests.peers.webhook import Answer, Receiver, Served, serve

SECRET = "whsec_" + base64.b64encode(b"clarion-status-hook-key-32-bytes").decode()


def config(extra: str = "") -> StatusWebhooksConfig:
    return parse_catalog(
        '[status_webhooks]\nallow_http_hosts = ["127.0.0.1"]\nallow_networks = ["127.0.0.0/8"]\n'
        "timeout_seconds = 0.5\nconnect_timeout_seconds = 0.5\nlanes = 4\nwindow = 50\n"
        "retry = { base_seconds = 0.05, max_seconds = 0.2, give_up_seconds = 60 }\n" + extra
    ).status_webhooks


def status(delivery: int, version: int) -> DueStatus:
    body = {"type": "delivery.sent", "data": {"delivery_id": f"d{delivery}", "version": version}}
    return DueStatus("1-0", f"d{delivery}", version, json.dumps(body).encode())


@pytest.fixture
def served() -> Iterator[Served]:
    with serve(Receiver(SECRET)) as running:
        yield running


@asynccontextmanager
async def sending(
    redis: Redis,
    keys: KeySpace,
    url: str,
    statuses: Sequence[DueStatus],
    settings: StatusWebhooksConfig,
    max_batch: int = 1,
) -> AsyncIterator[Sender]:
    """The statuses in shop's outbox and its sender running until the block ends."""
    hook = await StatusWebhookStore(redis, keys).put("shop", url, SECRET, max_batch)
    await append_statuses(redis, keys, 0, {"shop": statuses})
    sender = Sender(redis, keys, "shop", Endpoint("shop", settings), settings,
                    dlq_retention_ms=60_000)  # fmt: skip
    sender.configure(hook)
    task = asyncio.create_task(sender.run())
    try:
        yield sender
    finally:
        sender.stop()
        await asyncio.wait_for(task, 5)
        await sender.endpoint.close()


def versions_by_delivery(receiver: Receiver) -> dict[str, list[int]]:
    """Each delivery's versions in the order the receiver took them (2xx only)."""
    seen: dict[str, list[int]] = defaultdict(list)
    for key in receiver.deliveries:  # insertion order: the order they were taken
        delivery, version = key.rsplit(".", 1)
        seen[delivery].append(int(version))
    return seen


async def outbox_empty(redis: Redis, keys: KeySpace) -> bool:
    return await redis.xlen(keys.status_webhooks("shop").outbox) == 0


async def test_every_status_arrives_once_in_order_per_delivery(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    statuses = [status(d, v) for v in (2, 3, 4) for d in range(10)]
    async with sending(real_redis, keys, served.url("/s"), statuses, config()):
        await wait_until(lambda: outbox_empty(real_redis, keys))
    assert len(served.receiver.deliveries) == 30
    assert served.receiver.duplicates == served.receiver.unverified == 0
    assert all(seen == [2, 3, 4] for seen in versions_by_delivery(served.receiver).values())
    assert set(served.receiver.deliveries) == {f"d{d}.{v}" for d in range(10) for v in (2, 3, 4)}


async def test_a_receiver_that_fails_for_a_while_then_recovers_gets_each_once(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    # 503s, then answers that come too late (and say 503 when they come), then 200s.
    failing = [Answer(503)] * 12 + [Answer(503, hang_seconds=1.0)] * 8
    served.receiver.script("/s", *failing)
    statuses = [status(d, v) for v in (2, 3) for d in range(6)]
    async with sending(real_redis, keys, served.url("/s"), statuses, config()):
        await wait_until(lambda: outbox_empty(real_redis, keys), within=30)
    assert len(served.receiver.attempts) > len(statuses)  # it did fail, and was retried
    assert set(served.receiver.deliveries) == {f"d{d}.{v}" for d in range(6) for v in (2, 3)}
    assert served.receiver.duplicates == 0
    assert all(seen == [2, 3] for seen in versions_by_delivery(served.receiver).values())
    assert await read_dead_letters(real_redis, keys.status_webhooks("shop")) == []


async def test_statuses_given_up_go_to_the_dead_letters_with_why(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    served.receiver.script("/s", *[Answer(503)] * 1000)
    quick = "retry = { base_seconds = 0.05, max_seconds = 0.1, give_up_seconds = 0.6 }\n"
    settings = msgspec.structs.replace(config(), retry=parse_catalog(
        f"[status_webhooks]\n{quick}"
    ).status_webhooks.retry)  # fmt: skip
    async with sending(real_redis, keys, served.url("/s"), [status(1, 2), status(1, 3)], settings):
        await wait_until(lambda: outbox_empty(real_redis, keys), within=10)
    letters = await read_dead_letters(real_redis, keys.status_webhooks("shop"))
    assert [d.webhook_id for d in letters] == ["d1.2", "d1.3"]  # in order: one lane
    first = letters[0]
    assert first.attempts >= 2
    assert (first.status_code, first.error) == (503, "127.0.0.1 answered 503")
    assert first.last_attempt_ms >= first.first_attempt_ms > 0
    # The second waited behind the first; whether it was tried once more depends on the
    # time left: either way it says what the endpoint answered.
    assert letters[1].status_code == 503
    assert "127.0.0.1 answered 503" in letters[1].error
    assert not served.receiver.deliveries


async def test_old_statuses_drain_quickly_once_an_outage_outlasted_them(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    hooks = keys.status_webhooks("shop")
    await StatusWebhookStore(real_redis, keys).put("shop", served.url("/s"), SECRET)
    seconds, _ = await real_redis.time()
    hour_ago = (int(seconds) - 3600) * 1000
    for n in range(20):
        await real_redis.xadd(hooks.outbox, {"d": f"d{n}", "v": 2, "b": b"{}"},
                              id=f"{hour_ago}-{n}")  # fmt: skip
    served.receiver.script("/s", *[Answer(503)] * 1000)
    settings = parse_catalog(
        '[status_webhooks]\nallow_http_hosts = ["127.0.0.1"]\nallow_networks = ["127.0.0.0/8"]\n'
        "lanes = 1\nretry = { give_up_seconds = 60 }\n"
    ).status_webhooks
    started = time.monotonic()
    async with sending(real_redis, keys, served.url("/s"), [], settings):
        await wait_until(lambda: outbox_empty(real_redis, keys), within=10)
    assert time.monotonic() - started < 5
    assert len(served.receiver.attempts) == 1  # one try; the rest given up unsent
    letters = await read_dead_letters(real_redis, hooks)
    assert [d.attempts for d in letters] == [1] + [0] * 19
    assert letters[1].error == (
        "not sent: past give_up_seconds while the endpoint was failing (127.0.0.1 answered 503)"
    )


async def test_batches_when_the_producer_asked_for_them(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    statuses = [status(d, v) for v in (2, 3) for d in range(40)]
    async with sending(real_redis, keys, served.url("/s"), statuses, config(), max_batch=25):
        await wait_until(lambda: outbox_empty(real_redis, keys))
    assert len(served.receiver.deliveries) == 80
    assert served.receiver.duplicates == 0
    assert len(served.receiver.attempts) < 80  # several per POST
    bodies = [json.loads(a.body) for a in served.receiver.attempts]
    assert {b["type"] for b in bodies} == {"delivery.batch"}
    assert max(len(b["data"]) for b in bodies) <= 25
    assert all(seen == [2, 3] for seen in versions_by_delivery(served.receiver).values())
    assert all(a.webhook_id.startswith("batch_") for a in served.receiver.attempts)


async def test_a_stop_lets_the_post_in_flight_finish(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    served.receiver.script("/s", Answer(200, hang_seconds=0.3))
    async with sending(real_redis, keys, served.url("/s"), [status(1, 2)], config()):
        await wait_until(lambda: asyncio.sleep(0, bool(served.receiver.attempts)))
    # Stopped while the receiver held the POST: its answer was waited for and recorded.
    assert set(served.receiver.deliveries) == {"d1.2"}
    assert await outbox_empty(real_redis, keys)


async def test_a_changed_url_and_secret_are_used_from_the_next_post(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    other_secret = "whsec_" + base64.b64encode(b"another-status-hook-key-32-bytes").decode()
    with serve(Receiver(other_secret)) as other:
        async with sending(real_redis, keys, served.url("/s"), [status(1, 2)], config()) as sender:
            await wait_until(lambda: outbox_empty(real_redis, keys))
            sender.configure(await StatusWebhookStore(real_redis, keys).put(
                "shop", other.url("/new"), other_secret
            ))  # fmt: skip
            await append_statuses(real_redis, keys, 0, {"shop": [DueStatus("2-0", "d1", 3, b"{}")]})
            sender.wake()
            await wait_until(lambda: outbox_empty(real_redis, keys))
        assert set(other.receiver.deliveries) == {"d1.3"}
        assert other.receiver.unverified == 0
    assert set(served.receiver.deliveries) == {"d1.2"}
