"""From ``events`` to the producers' outboxes: the final statuses and feedback of producers
with a webhook, in stream order, once each, with their owners found however long ago the
notification was accepted (a fallback made after it too), a step not needed SKIPPED, a
notification that joined a digest DIGESTED; nothing for anyone else."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import asyncpg
import structlog
from redis.asyncio import Redis

from app.status_webhooks.dispatcher import Dispatcher
from app.status_webhooks.owners import Owners, ReadModelOwners
from streams.core import codec
from streams.core.consumer_groups import PROJECTOR_GROUP, STATUS_WEBHOOK_GROUP, ensure_group
from streams.core.events import (
    DeliveryAttemptFailed,
    DeliveryDigested,
    DeliveryFailed,
    DeliveryReplayed,
    DeliverySent,
    DeliverySuppressed,
    DigestClosed,
    Event,
    NotificationDigested,
    ProviderFeedbackReceived,
)
from streams.core.ids import new_id
from streams.core.keys import KeySpace, ShardKeys
from streams.core.vocabulary import Channel, ErrorClass
from streams.status_webhooks.outbox import DueStatus, OutboxEntry, append_statuses, read_outbox
from streams.status_webhooks.store import StatusWebhookStore
from tests.integration.delivery_support import accept, fast_catalog
from tests.integration.projection_support import accepted, delivered, steps_and_a_fallback

AT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SECRET = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"


async def write(redis: Redis, shard: ShardKeys, *entries: list[Event]) -> None:
    for events in entries:
        await redis.xadd(shard.events, {codec.EVENT_FIELD: codec.encode_events(events)})


async def read(redis: Redis, shard: ShardKeys, cursor: str = ">") -> list[Any]:
    await ensure_group(redis, shard.events, STATUS_WEBHOOK_GROUP)
    reply: Any = await redis.xreadgroup(
        STATUS_WEBHOOK_GROUP, "c", {shard.events: cursor}, count=1000
    )
    return reply[0][1] if reply else []


def dispatcher(
    redis: Redis,
    keys: KeySpace,
    wanted: set[str],
    woken: list[str] | None = None,
    read_model: ReadModelOwners | None = None,
    **options: Any,
) -> Dispatcher:
    return Dispatcher(
        redis, keys, Owners(redis, keys, read_model), "c",
        wanted=lambda: frozenset(wanted),
        wake=(woken if woken is not None else []).append, **options,
    )  # fmt: skip


async def outbox(redis: Redis, keys: KeySpace, producer: str) -> list[OutboxEntry]:
    return await read_outbox(redis, keys.status_webhooks(producer), "-", 1000)


def data(entry: OutboxEntry) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(entry.body)["data"]
    return payload


async def configured(redis: Redis, keys: KeySpace, *producers: str) -> None:
    for producer in producers:
        await StatusWebhookStore(redis, keys).put(producer, "https://a.example.com/s", SECRET)


async def test_final_statuses_of_producers_with_a_webhook_go_to_their_outbox_in_order(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await configured(redis, keys, "shop")
    shop, other = new_id(0), new_id(0)
    sent, suppressed, others = new_id(0), new_id(0), new_id(0)
    ids = {"at": AT, "notification_id": shop}
    await write(
        redis, shard,
        [accepted(shop, [sent, suppressed], at=AT, producer="shop"),
         *delivered(shop, sent, "QUEUED", at=AT, channel="EMAIL"),
         DeliverySuppressed(**ids, delivery_id=suppressed, version=1, channel=Channel.PUSH,
                            reason="opted_out"),
         accepted(other, [others], at=AT, producer="other"),
         *delivered(other, others, "QUEUED", at=AT)],
        [DeliveryAttemptFailed(**ids, delivery_id=sent, version=2, attempt=1,
                               error_class=ErrorClass.TRANSIENT, error="503")],
        [DeliverySent(**ids, delivery_id=sent, version=3, attempt=2, provider="sandbox",
                      provider_message_id="m-1"),
         DeliverySent(at=AT, notification_id=other, delivery_id=others, version=2, attempt=1,
                      provider="sandbox", provider_message_id="m-2")],
    )  # fmt: skip
    woken: list[str] = []

    assert await dispatcher(redis, keys, {"shop"}, woken).handle(shard, await read(redis, shard))

    entries = await outbox(redis, keys, "shop")
    assert [e.webhook_id for e in entries] == [f"{suppressed}.1", f"{sent}.3"]
    assert {k: data(entries[1])[k] for k in ("status", "channel", "notification_type")} == {
        "status": "SENT", "channel": "EMAIL", "notification_type": "otp",
    }  # fmt: skip
    assert data(entries[0])["reason"] == "opted_out"
    assert await outbox(redis, keys, "other") == []
    assert woken == ["shop"]
    assert (await redis.xpending(shard.events, STATUS_WEBHOOK_GROUP))["pending"] == 0


async def test_a_failure_its_fallback_and_a_step_not_needed_are_told_as_they_end(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await configured(redis, keys, "shop")
    nid, first, step, fallback = new_id(0), new_id(0), new_id(0), new_id(0)
    await write(redis, shard, *steps_and_a_fallback(nid, first, step, fallback))

    assert await dispatcher(redis, keys, {"shop"}).handle(shard, await read(redis, shard))

    told = [
        (e.webhook_id, data(e)["status"], data(e)["channel"], data(e)["reason"])
        for e in await outbox(redis, keys, "shop")
    ]
    assert told == [
        (f"{first}.2", "FAILED", "EMAIL", ""),
        (f"{fallback}.3", "SENT", "PUSH", ""),
        (f"{step}.3", "SKIPPED", "SMS", "read"),
    ]


async def test_a_notification_that_joins_a_digest_is_told_digested_its_digest_not(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await configured(redis, keys, "shop")
    nid, email, push, made = new_id(0), new_id(0), new_id(0), new_id(0)
    ids = {"at": AT, "notification_id": nid}
    digest = {"digest_id": "g-1", "recipient_id": "u-1", "notification_type": "comment"}
    await write(
        redis, shard,
        [accepted(nid, [email, push], at=AT, producer="shop", notification_type="comment"),
         DeliveryDigested(**ids, delivery_id=email, version=1, channel=Channel.EMAIL),
         DeliveryDigested(**ids, delivery_id=push, version=1, channel=Channel.PUSH)],
        [NotificationDigested(**ids, **digest, count=1, closes_at=AT)],
        [DigestClosed(at=AT, **digest, count=1, notification_id=made)],
    )  # fmt: skip

    assert await dispatcher(redis, keys, {"shop"}).handle(shard, await read(redis, shard))

    told = [
        (e.webhook_id, json.loads(e.body)["type"], data(e)["status"], data(e)["channel"],
         data(e)["reason"], data(e)["notification_type"])
        for e in await outbox(redis, keys, "shop")
    ]  # fmt: skip
    assert told == [
        (f"{email}.1", "delivery.digested", "DIGESTED", "EMAIL", "digest", "comment"),
        (f"{push}.1", "delivery.digested", "DIGESTED", "PUSH", "digest", "comment"),
    ]


async def test_entries_read_again_after_a_crash_go_in_once(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await configured(redis, keys, "shop")
    nid, did = new_id(0), new_id(0)
    await write(redis, shard, [accepted(nid, [did], at=AT, producer="shop"),
                               *delivered(nid, did, "SENT", at=AT)])  # fmt: skip
    entries = await read(redis, shard)
    first = dispatcher(redis, keys, {"shop"})
    await first.handle(shard, entries)
    # Another process (after a crash before the acknowledgement) reads them again.
    await dispatcher(redis, keys, {"shop"}).handle(shard, entries)
    assert [e.webhook_id for e in await outbox(redis, keys, "shop")] == [f"{did}.2"]


async def test_a_replayed_delivery_that_ends_again_is_told_again_with_its_version(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await configured(redis, keys, "shop")
    nid, did = new_id(0), new_id(0)
    ids = {"at": AT, "notification_id": nid, "delivery_id": did}
    await write(
        redis, shard,
        [accepted(nid, [did], at=AT, producer="shop"), *delivered(nid, did, "FAILED", at=AT)],
        [DeliveryReplayed(**ids, version=4, operator="anna", reason="fixed")],
        [DeliverySent(**ids, version=5, attempt=1, provider="sandbox", provider_message_id="m")],
        [ProviderFeedbackReceived(**ids, version=6, feedback="delivered", provider="sandbox",
                                  status="DELIVERED")],
    )  # fmt: skip

    await dispatcher(redis, keys, {"shop"}).handle(shard, await read(redis, shard))

    entries = await outbox(redis, keys, "shop")
    assert [(data(e)["status"], data(e)["version"]) for e in entries] == [
        ("FAILED", 2), ("SENT", 5), ("DELIVERED", 6),
    ]  # fmt: skip
    assert json.loads(entries[2].body)["type"] == "delivery.feedback"


async def test_an_owner_nobody_remembers_is_looked_up(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await configured(redis, keys, "orders")
    answer = await accept(redis, keys, fast_catalog(), {
        "recipient": {"id": "u-1", "phone": "+4915112345678"}, "type": "otp",
        "data": {"code": "1"},
    }, "k-1")  # fmt: skip
    await read(redis, shard)  # the acceptance was read long ago, by a process since gone
    [sms] = answer["deliveries"]
    await write(redis, shard, [
        DeliveryFailed(at=AT, notification_id=answer["id"], delivery_id=sms["id"], version=2,
                       attempts=1, error_class=ErrorClass.PERMANENT, error="invalid number"),
    ])  # fmt: skip

    await dispatcher(redis, keys, {"orders"}).handle(shard, await read(redis, shard))

    [entry] = await outbox(redis, keys, "orders")
    assert (data(entry)["channel"], data(entry)["status"]) == ("SMS", "FAILED")


async def test_an_owner_never_found_holds_the_batch_back_then_is_skipped(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await configured(redis, keys, "shop")
    known, unknown = new_id(0), new_id(0)
    known_did, unknown_did = new_id(0), new_id(0)
    await write(redis, shard, [accepted(known, [known_did], at=AT, producer="shop"),
                               *delivered(known, known_did, "QUEUED", at=AT)])  # fmt: skip
    await write(redis, shard, [
        *delivered(unknown, unknown_did, "SENT", at=AT)[1:],
        *delivered(known, known_did, "SENT", at=AT)[1:],
    ])  # fmt: skip
    with structlog.testing.capture_logs() as logs:
        started = asyncio.get_running_loop().time()
        handled = await dispatcher(redis, keys, {"shop"}, lookup_wait_s=0.3).handle(
            shard, await read(redis, shard)
        )
        waited = asyncio.get_running_loop().time() - started
    assert handled
    assert waited >= 0.3
    assert [e.webhook_id for e in await outbox(redis, keys, "shop")] == [f"{known_did}.2"]
    [skipped] = [line for line in logs if line["event"] == "status_webhooks.owner_unknown"]
    assert skipped["delivery_ids"] == [unknown_did]


async def test_without_any_webhook_entries_are_only_acknowledged(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    nid, did = new_id(0), new_id(0)
    await write(redis, shard, [accepted(nid, [did], at=AT, producer="shop"),
                               *delivered(nid, did, "SENT", at=AT)])  # fmt: skip
    quiet = dispatcher(redis, keys, set())
    assert await quiet.handle(shard, await read(redis, shard))
    assert quiet.owners.owner(nid) is None  # not even decoded
    assert (await redis.xpending(shard.events, STATUS_WEBHOOK_GROUP))["pending"] == 0


async def test_the_reader_drains_its_own_pending_entries_first(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await configured(real_redis, keys, "shop")
    nid, first, second = new_id(0), new_id(0), new_id(0)
    await write(real_redis, shard, [accepted(nid, [first, second], at=AT, producer="shop"),
                                    *delivered(nid, first, "SENT", at=AT),
                                    *delivered(nid, second, "QUEUED", at=AT)])  # fmt: skip
    await read(real_redis, shard)  # read by this consumer, then it died
    await write(real_redis, shard, delivered(nid, second, "SENT", at=AT)[1:])
    running = dispatcher(real_redis, keys, {"shop"})
    task = asyncio.create_task(running.run())
    try:
        for _ in range(100):
            if len(await outbox(real_redis, keys, "shop")) == 2:
                break
            await asyncio.sleep(0.05)
    finally:
        running.stop()
        await asyncio.wait_for(task, 5)
    assert [e.webhook_id for e in await outbox(real_redis, keys, "shop")] == [
        f"{first}.2", f"{second}.2",
    ]  # fmt: skip


async def test_a_predecessors_pending_entries_are_taken_over_first_in_order(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await configured(real_redis, keys, "shop")
    nid, first, second = new_id(0), new_id(0), new_id(0)
    await write(real_redis, shard, [accepted(nid, [first, second], at=AT, producer="shop"),
                                    *delivered(nid, first, "SENT", at=AT),
                                    *delivered(nid, second, "QUEUED", at=AT)])  # fmt: skip
    # The process active before, on another host, put the entry's status in and died before
    # acknowledging it; then a newer entry came.
    await ensure_group(real_redis, shard.events, STATUS_WEBHOOK_GROUP)
    reply: Any = await real_redis.xreadgroup(
        STATUS_WEBHOOK_GROUP, "other-host", {shard.events: ">"}, count=10
    )
    [(entry_id, _)] = reply[0][1]
    put_in = DueStatus(entry_id.decode(), first, 2, b"{}")
    await append_statuses(real_redis, keys, 0, {"shop": [put_in]})
    await write(real_redis, shard, delivered(nid, second, "SENT", at=AT)[1:])

    running = dispatcher(real_redis, keys, {"shop"})
    task = asyncio.create_task(running.run())
    try:
        for _ in range(100):
            if len(await outbox(real_redis, keys, "shop")) >= 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    finally:
        running.stop()
        await asyncio.wait_for(task, 5)
    assert [e.webhook_id for e in await outbox(real_redis, keys, "shop")] == [
        f"{first}.2", f"{second}.2",
    ]  # fmt: skip
    assert (await real_redis.xpending(shard.events, STATUS_WEBHOOK_GROUP))["pending"] == 0


async def test_an_owner_the_projector_never_wrote_is_skipped_at_once(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await configured(real_redis, keys, "shop")
    gone, did = new_id(0), new_id(0)  # accepted longer ago than anything keeps
    await write(real_redis, shard, delivered(gone, did, "SENT", at=AT)[1:])
    await ensure_group(real_redis, shard.events, PROJECTOR_GROUP)
    projected: Any = await real_redis.xreadgroup(PROJECTOR_GROUP, "p", {shard.events: ">"})
    await real_redis.xack(shard.events, PROJECTOR_GROUP, *[e for e, _ in projected[0][1]])

    async def connect() -> asyncpg.Pool:
        return pool

    patient = dispatcher(real_redis, keys, {"shop"}, read_model=ReadModelOwners(connect),
                         lookup_wait_s=30)  # fmt: skip
    started = asyncio.get_running_loop().time()
    assert await patient.handle(shard, await read(real_redis, shard))
    assert asyncio.get_running_loop().time() - started < 5
    assert await outbox(real_redis, keys, "shop") == []
