"""Finding dead letters against real Redis: the filters a replay selects by, and the summary an
operator reads."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from redis.asyncio import Redis

from app.operations.dlq import letter_view
from streams.dlq.scan import Selection, summarize
from streams.keys import KeySpace
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
