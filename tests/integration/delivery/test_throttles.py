"""Recipients' throttles against real Redis: the limit holds, a retry never counts twice, the
window slides, a refusal says how long until it allows, logs expire, and concurrent workers
together allow exactly the limit."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.delivery.throttles import ThrottleRequest, Throttles
from tests.conftest import connect_test_redis

MINUTE = 60_000


def requests(
    recipient: str, ids: list[str], limit: int = 3, window: int = MINUTE
) -> list[ThrottleRequest]:
    return [(recipient, "t:marketing", limit, window, delivery_id) for delivery_id in ids]


async def test_the_limit_holds_and_refusals_change_nothing(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    throttles = Throttles(real_redis, keys)
    waits = await throttles.count(requests("anna", [f"d{n}" for n in range(10)]))
    assert waits[:3] == [0, 0, 0]
    assert all(MINUTE - 1000 < wait <= MINUTE for wait in waits[3:])
    log = keys.throttle("anna", "t:marketing")
    assert [m.decode() for m in await real_redis.zrange(log, 0, -1)] == ["d0", "d1", "d2"]


async def test_a_retry_of_a_counted_delivery_is_allowed_without_counting_again(
    real_redis: Redis, key_prefix: str
) -> None:
    throttles = Throttles(real_redis, KeySpace(key_prefix))
    assert await throttles.count(requests("anna", ["d0", "d1", "d2"])) == [0, 0, 0]
    assert await throttles.count(requests("anna", ["d1", "d0", "d2", "d1"])) == [0, 0, 0, 0]
    assert (await throttles.count(requests("anna", ["d3"])))[0] > 0


async def test_recipients_scopes_and_channels_count_apart(
    real_redis: Redis, key_prefix: str
) -> None:
    throttles = Throttles(real_redis, KeySpace(key_prefix))
    batch = [
        ("anna", "t:marketing", 1, MINUTE, "a1"),
        ("ben", "t:marketing", 1, MINUTE, "b1"),
        ("anna", "c:social", 1, MINUTE, "a2"),
        ("anna", "default:EMAIL", 1, MINUTE, "a3"),
        ("anna", "default:PUSH", 1, MINUTE, "a4"),
        ("anna", "default:EMAIL", 1, MINUTE, "a5"),
    ]
    waits = await throttles.count(batch)
    assert waits[:5] == [0] * 5
    assert waits[5] > 0


async def test_the_window_slides_and_a_refusal_says_when_it_allows(
    real_redis: Redis, key_prefix: str
) -> None:
    throttles = Throttles(real_redis, KeySpace(key_prefix))
    window = 600
    assert await throttles.count(requests("anna", ["d0"], limit=2, window=window)) == [0]
    await asyncio.sleep(0.3)
    assert await throttles.count(requests("anna", ["d1"], limit=2, window=window)) == [0]
    [wait] = await throttles.count(requests("anna", ["d2"], limit=2, window=window))
    # d0 leaves the window 600 ms after it was counted, about 300 ms ago.
    assert 200 < wait <= 320
    await asyncio.sleep(wait / 1000)
    assert await throttles.count(requests("anna", ["d2"], limit=2, window=window)) == [0]
    # d1 still counts: the next waits for it.
    [wait] = await throttles.count(requests("anna", ["d3"], limit=2, window=window))
    assert 0 < wait <= 320


async def test_a_log_expires_one_window_after_its_newest_entry(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    throttles = Throttles(real_redis, keys)
    await throttles.count(requests("anna", ["d0"], window=5000))
    log = keys.throttle("anna", "t:marketing")
    assert 4000 < await real_redis.pttl(log) <= 5000
    await throttles.count(requests("anna", ["d1"], window=300))
    await asyncio.sleep(0.4)
    assert await real_redis.exists(log) == 0


async def test_twenty_concurrent_workers_allow_exactly_the_limit(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    clients = [connect_test_redis() for _ in range(4)]
    try:
        # Each call its own Throttles, as in separate processes, over four connections.
        calls = [
            Throttles(clients[n % 4], keys).count(requests("anna", [f"d{n}"])) for n in range(20)
        ]
        replies = await asyncio.gather(*calls)
    finally:
        for client in clients:
            await client.aclose()
    assert sum(reply == [0] for reply in replies) == 3
    assert await real_redis.zcard(keys.throttle("anna", "t:marketing")) == 3
