"""A producer's outbox: statuses put in once per events entry and in order, read from any
point, deleted when done, moved to the dead letters with why."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.status_webhooks.outbox import (
    DueStatus,
    GivenUp,
    append_statuses,
    dead_letter,
    delete_done,
    read_dead_letters,
    read_outbox,
)
from streams.status_webhooks.store import StatusWebhookStore

SECRET = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"


def due(source: str, delivery: str, version: int) -> DueStatus:
    return DueStatus(source, delivery, version, b'{"d": "%s"}' % delivery.encode())


async def test_each_events_entry_goes_in_once_in_order(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix, shards=2)
    await StatusWebhookStore(redis, keys).put("orders", "https://a.example.com", SECRET)
    hooks = keys.status_webhooks("orders")
    batch = [due("10-0", "d1", 3), due("10-0", "d2", 2), due("11-5", "d1", 5)]
    assert await append_statuses(redis, keys, 0, {"orders": batch}) == {"orders": 3}
    # Read again after a crash, cut differently: only what came after goes in.
    again = [due("11-5", "d1", 5), due("12-0", "d3", 2)]
    assert await append_statuses(redis, keys, 0, {"orders": again}) == {"orders": 1}
    # Another shard has positions of its own.
    assert await append_statuses(redis, keys, 1, {"orders": [due("1-0", "d9", 2)]}) == {"orders": 1}
    entries = await read_outbox(redis, hooks, "-", 10)
    assert [e.webhook_id for e in entries] == ["d1.3", "d2.2", "d1.5", "d3.2", "d9.2"]
    assert entries[0].body == b'{"d": "d1"}'
    assert [e.webhook_id for e in await read_outbox(redis, hooks, entries[1].entry_id, 2)] == [
        "d1.5",
        "d3.2",
    ]


async def test_nothing_goes_in_for_a_producer_without_a_webhook(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    assert await append_statuses(redis, keys, 0, {"gone": [due("1-0", "d", 1)], "none": []}) == {
        "gone": -1
    }
    assert await redis.exists(keys.status_webhooks("gone").outbox) == 0


async def test_done_entries_are_deleted(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    await StatusWebhookStore(redis, keys).put("orders", "https://a.example.com", SECRET)
    hooks = keys.status_webhooks("orders")
    await append_statuses(redis, keys, 0, {"orders": [due("1-0", "a", 1), due("1-0", "b", 1)]})
    first, second = await read_outbox(redis, hooks, "-", 10)
    assert await delete_done(redis, hooks, [first.entry_id]) == 1
    assert await delete_done(redis, hooks, []) == 0
    assert await read_outbox(redis, hooks, "-", 10) == [second]


async def test_a_given_up_status_keeps_why(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    await StatusWebhookStore(redis, keys).put("orders", "https://a.example.com", SECRET)
    hooks = keys.status_webhooks("orders")
    await append_statuses(redis, keys, 0, {"orders": [due("1-0", "a", 2), due("1-0", "b", 3)]})
    entries = await read_outbox(redis, hooks, "-", 10)
    why = GivenUp(
        attempts=7, first_attempt_ms=100, last_attempt_ms=900, status_code=503,
        error="a.example.com answered 503",
    )  # fmt: skip

    assert await dead_letter(redis, hooks, entries, 60_000, why) == 2
    assert await dead_letter(redis, hooks, entries, 60_000, why) == 0  # moved already

    assert await read_outbox(redis, hooks, "-", 10) == []
    letters = await read_dead_letters(redis, hooks)
    assert [(d.webhook_id, d.body, d.attempts, d.status_code) for d in letters] == [
        ("a.2", b'{"d": "a"}', 7, 503),
        ("b.3", b'{"d": "b"}', 7, 503),
    ]
    assert letters[0].error == "a.example.com answered 503"
    assert letters[0].added_ms == entries[0].added_ms
    assert 0 < await redis.pttl(hooks.dlq) <= 60_000  # kept for the retention


async def test_dead_letters_older_than_the_retention_go_as_new_ones_come(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    await StatusWebhookStore(redis, keys).put("orders", "https://a.example.com", SECRET)
    hooks = keys.status_webhooks("orders")
    seconds, _ = await redis.time()
    await redis.xadd(hooks.dlq, {"webhook_id": "old.1"}, id=f"{(int(seconds) - 7200) * 1000}-0")
    await append_statuses(redis, keys, 0, {"orders": [due("1-0", "a", 2)]})
    why = GivenUp(attempts=1, first_attempt_ms=1, last_attempt_ms=1, status_code=0, error="x")

    await dead_letter(redis, hooks, await read_outbox(redis, hooks, "-", 1), 3_600_000, why)

    assert [d.webhook_id for d in await read_dead_letters(redis, hooks)] == ["a.2"]


async def test_entries_taken_over_out_of_order_go_in_again_never_lost(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    await StatusWebhookStore(redis, keys).put("orders", "https://a.example.com", SECRET)
    hooks = keys.status_webhooks("orders")
    await append_statuses(redis, keys, 0, {"orders": [due("20-0", "new", 2)]})
    # An older entry a dead consumer left pending, found after the newer one went in.
    late = {"orders": [due("10-0", "old", 2)]}
    assert await append_statuses(redis, keys, 0, late) == {"orders": 0}  # "once" passes it over
    assert await append_statuses(redis, keys, 0, late, again=True) == {"orders": 1}
    assert [e.webhook_id for e in await read_outbox(redis, hooks, "-", 10)] == [
        "new.2",
        "old.2",
    ]
    assert await redis.hget(hooks.positions, "0") == b"20-0"  # never moved back
