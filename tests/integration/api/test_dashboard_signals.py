"""The dashboard's signals against real Redis and PostgreSQL: the counters as every process
adds them (sends after a retry with their share, unsubscribes per type by source, duplicates
per layer, deliveries throttled per type) and the open dead letters per error class, shown
on ``GET /dashboard``; without Redis the page still shows and says so."""

from __future__ import annotations

import re

import asyncpg
from redis.asyncio import Redis

from app.api.app import create_app
from app.api.dashboard_signals import RetryShare, Unsubscribes, read_signals
from app.metrics import (
    DELIVERY_ATTEMPTS,
    DUPLICATES_SKIPPED,
    SENT_AFTER_RETRY,
    THROTTLED,
    UNSUBSCRIBES,
)
from app.settings import Settings
from streams.core.keys import KeySpace
from streams.metrics.recorder import MetricsRecorder
from tests.conftest import basic, http_client
from tests.integration.delivery_support import fast_catalog

ORDERS_BASIC = {"Authorization": basic("orders", "orders-secret")}


async def record(redis: Redis, keys: KeySpace) -> None:
    """Two SMS sent, one of them after a retry; an email sent at once; unsubscribes from
    marketing (two by link, on two channels; one by feedback) and from an order confirmation
    (feedback); three replayed requests; one BUG and two POISON dead letters, one of those
    replayed already."""
    recorder = MetricsRecorder(redis, keys)
    for channel, attempts in (("SMS", 1.0), ("SMS", 3.0), ("EMAIL", 1.0)):
        recorder.observe(DELIVERY_ATTEMPTS, (channel, "SENT"), attempts)
    recorder.observe(DELIVERY_ATTEMPTS, ("SMS", "FAILED"), 2.0)  # not a send
    recorder.inc(SENT_AFTER_RETRY, ("SMS",))
    recorder.inc(UNSUBSCRIBES, ("marketing", "EMAIL", "link"))
    recorder.inc(UNSUBSCRIBES, ("marketing", "SMS", "link"))
    recorder.inc(UNSUBSCRIBES, ("marketing", "EMAIL", "feedback"))
    recorder.inc(UNSUBSCRIBES, ("order_confirmed", "EMAIL", "feedback"))
    recorder.inc(DUPLICATES_SKIPPED, ("ingest",), 3)
    recorder.inc(THROTTLED, ("marketing", "suppress"), 7)
    recorder.inc(THROTTLED, ("marketing", "defer"), 2)
    await recorder.flush()
    dlq = keys.shard(0).dlq
    await redis.xadd(dlq, {"error_class": "BUG", "last_error": "KeyError"})
    await redis.xadd(dlq, {"reason": "unreadable work entry"})  # POISON
    replayed = await redis.xadd(dlq, {"error_class": "POISON", "last_error": "leased 6 times"})
    await redis.hset(keys.shard(0).dlq_resolved, replayed, '{"outcome": "replayed"}')


async def test_the_signals_sum_the_counters_and_count_open_dead_letters(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    await record(real_redis, keys)
    signals = await read_signals(real_redis, keys)
    assert signals.retries == [RetryShare("EMAIL", 1, 0), RetryShare("SMS", 2, 1)]
    assert signals.unsubscribes == [
        Unsubscribes("marketing", link=2, feedback=1), Unsubscribes("order_confirmed", 0, 1),
    ]  # fmt: skip
    assert signals.duplicates == [("ingest", 3), ("worker", 0), ("feedback", 0)]
    assert dict(signals.dead_letters) == {"TRANSIENT": 0, "PERMANENT": 0, "POISON": 1, "BUG": 1}
    assert not signals.dead_letters_truncated
    assert signals.throttled == [("marketing", 7, 2)]


def table(page: str, table_id: str) -> list[list[str]]:
    """The body rows of the page's table ``table_id``, each cell's text."""
    body = page.split(f'id="{table_id}"', 1)[1].split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


async def test_the_dashboard_shows_the_signals(
    real_redis: Redis, settings: Settings, key_prefix: str, pool: asyncpg.Pool
) -> None:
    await record(real_redis, KeySpace(key_prefix))
    app = create_app(settings, redis=real_redis, catalog=fast_catalog(), db=pool)
    async with http_client(app) as client:
        response = await client.get("/dashboard", headers=ORDERS_BASIC)
    assert response.status_code == 200, response.text
    page = response.text
    assert table(page, "signals-retries") == [["EMAIL", "1", "0", "0.0 %"],
                                              ["SMS", "2", "1", "50.0 %"]]  # fmt: skip
    assert table(page, "signals-unsubscribes") == [["marketing", "2", "1"],
                                                   ["order_confirmed", "0", "1"]]  # fmt: skip
    assert table(page, "signals-duplicates") == [["ingest", "3"], ["worker", "0"],
                                                 ["feedback", "0"]]  # fmt: skip
    assert table(page, "signals-throttled") == [["marketing", "7", "2"]]
    assert table(page, "signals-dead-letters") == [
        ["TRANSIENT", "0"], ["PERMANENT", "0"], ["POISON", "1"], ["BUG", "1"],
    ]  # fmt: skip


async def test_without_redis_the_page_still_shows_and_says_so(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    gone = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    app = create_app(settings, redis=gone, catalog=fast_catalog(), db=pool)
    async with http_client(app) as client:
        response = await client.get("/dashboard", headers=ORDERS_BASIC)
    await gone.aclose()
    assert response.status_code == 200, response.text
    signals = response.text.split("<h2>Signals", 1)[1].split("<h2>", 1)[0]
    assert "the event log (Redis) is unavailable" in signals
    assert 'id="signals-retries"' not in response.text
