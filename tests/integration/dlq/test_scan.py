"""Finding dead letters against real Redis: the filters a replay selects by, and the summary an
operator reads."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from redis.asyncio import Redis

from app.operations.dlq import letter_view
from streams.core.keys import KeySpace
from streams.dlq.scan import Selection, summarize
from tests.integration.dlq_support import (
    EMAIL_BODY,
    dead_lettered,
    delivery_of,
    order,
    otp,
    replay,
    replayed_ids,
)

pytestmark = pytest.mark.timeout(60)


async def test_filters_select_by_type_channel_error_class_and_time(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    ids, _ = await dead_lettered(real_redis, keys, [otp(0), EMAIL_BODY])
    sms, email = (
        await delivery_of(real_redis, keys, "u-0"),
        await delivery_of(real_redis, keys, "u-9"),
    )
    entries = await real_redis.xrange(keys.shard(0).dlq)
    times = [int(entry_id.split(b"-")[0]) for entry_id, _ in entries]

    async def dry(**filters: Any) -> list[str]:
        selection = Selection(**filters)
        report = await replay(real_redis, keys, order(selection=selection, dry_run=True))
        return replayed_ids(report)

    assert await dry(notification_type="otp") == [sms]
    assert await dry(channel="EMAIL") == [email]
    assert await dry(error_class="TRANSIENT") == ids
    assert await dry(error_class="PERMANENT") == []
    assert await dry(delivery_ids=frozenset([email])) == [email]
    # The time range is of the dead-lettering, since inclusive, until exclusive.
    assert await dry(since_ms=times[1]) == [
        i for i, t in zip(ids, times, strict=True) if t >= times[1]
    ]
    assert await dry(until_ms=times[1]) == [
        i for i, t in zip(ids, times, strict=True) if t < times[1]
    ]
    assert await dry(since_ms=times[1] + 1) == []


async def test_the_summary_counts_open_entries_and_never_shows_an_address(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    ids, _ = await dead_lettered(real_redis, keys, [otp(0), otp(1), EMAIL_BODY])
    summary = await summarize(real_redis, keys, Selection(), samples=2)
    assert summary.open == 3
    assert summary.by_error_class == {"TRANSIENT": 3}
    assert summary.by_channel == {"SMS": 2, "EMAIL": 1}
    assert summary.by_type == {"otp": 2, "order_confirmed": 1}
    assert [s.delivery_id for s in summary.samples] == ids[:2]
    context = msgspec.to_builtins(letter_view(summary.samples[0]))
    assert context["last_error"] == "provider unreachable (outage)"
    assert context["attempts"] == 1

    everything = await summarize(real_redis, keys, Selection(), samples=3)
    text = msgspec.json.encode([letter_view(s) for s in everything.samples]).decode()
    assert "+4915112345678" not in text
    assert "anna@example.com" not in text
    assert "A-1" not in text  # template data stays out too
    assert '"order_id"' in text  # only the names of the template variables


async def test_a_summary_of_a_large_queue_looks_at_its_newest_entries_and_says_so(
    real_redis: Redis, key_prefix: str
) -> None:
    """Each view once scanned up to 100,000 entries: 10-18 s of API time on a full queue."""
    keys = KeySpace(key_prefix)
    dlq = keys.shard(0).dlq
    for n in range(1, 31):  # entries 1-30 ms after the epoch, of two producers
        fields = {"error_class": "PERMANENT", "channel": "SMS", "type": "otp",
                  "producer": "orders" if n % 2 else "billing"}  # fmt: skip
        await real_redis.xadd(dlq, fields, id=f"{n}-0")
    partial = await summarize(real_redis, keys, Selection(), samples=3, max_entries=10)
    assert (partial.open, partial.truncated, partial.complete_since_ms) == (10, True, 21)
    assert [s.entry_id for s in partial.samples] == ["21-0", "22-0", "23-0"]  # replay order
    whole = await summarize(real_redis, keys, Selection(), samples=3, max_entries=30)
    assert (whole.open, whole.truncated) == (30, False)
    assert [s.entry_id for s in whole.samples] == ["1-0", "2-0", "3-0"]
    own = await summarize(real_redis, keys, Selection(producer="orders"), samples=1)
    assert own.open == 15
    assert own.samples[0].producer == "orders"
