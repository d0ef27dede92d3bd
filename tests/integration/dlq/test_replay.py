"""DLQ replay against real Redis (and PostgreSQL for the audit trail in the read model).

Dead letters are made the way production makes them (``dlq_support``): a real worker meets a
provider outage, so the deliveries end FAILED in the DLQ. Once the outage is over an operator
replays them and a worker sends them.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from redis.asyncio import Redis

from app.ingest.quiet_hours import window_end
from app.operations.dlq import replay_view
from projections.database import connect
from projections.projector import Projector
from streams.core.events import (
    DeliveryDeferred,
    DeliveryReplayed,
    PreferenceEntry,
    QuietHoursSetting,
)
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel, Priority
from streams.dlq.entries import parse_entry
from streams.dlq.scan import Selection, summarize
from streams.recipients.settings import RecipientSettingsStore
from streams.recipients.suppressions import Suppression, SuppressionStore
from tests.conftest import DIGEST, stream_events
from tests.integration.delivery_support import (
    accept,
    fast_catalog,
    running_worker,
    sandbox_calls,
    state,
    wait_until,
)
from tests.integration.dlq_support import (
    dead_lettered,
    delivery_of,
    dlq_length_is,
    order,
    otp,
    replay,
    replayed_ids,
    skipped,
)

pytestmark = pytest.mark.timeout(60)


async def sent_ids(redis: Redis, keys: KeySpace) -> list[str]:
    return [c["delivery_id"] for c in await sandbox_calls(redis, keys) if c["outcome"] == "sent"]


async def snapshot(redis: Redis, prefix: str) -> dict[bytes, bytes | None]:
    """Every key under ``prefix`` with its serialized value: any write shows up here."""
    found = {}
    async for key in redis.scan_iter(match=f"{prefix}:*"):
        found[key] = await redis.dump(key)
    return found


async def test_replay_respects_the_limit_and_the_dlq_drains(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    ids, catalog = await dead_lettered(real_redis, keys, [otp(n) for n in range(5)])
    assert (await summarize(real_redis, keys, Selection(), samples=0)).open == 5

    first = await replay(real_redis, keys, order(limit=2))
    oldest = [d.delivery_id for d in (await summarize(
        real_redis, keys, Selection(), samples=5)).samples]  # fmt: skip
    assert replayed_ids(first) == ids[:2]  # the oldest dead letters first
    assert oldest == ids[2:]  # what is left open
    async with running_worker(real_redis, keys, catalog):
        await wait_until(lambda: all_sent(real_redis, keys, ids[:2]))
        second = await replay(real_redis, keys, order(limit=1000))
        assert replayed_ids(second) == ids[2:]
        await wait_until(lambda: all_sent(real_redis, keys, ids))

    assert sorted(await sent_ids(real_redis, keys)) == sorted(ids)  # each sent exactly once
    calls = await sandbox_calls(real_redis, keys)
    # Same delivery id, so the same provider idempotency key; a fresh attempt series.
    assert all(c["idempotency_key"] == c["delivery_id"] and c["attempt"] == "1" for c in calls)
    summary = await summarize(real_redis, keys, Selection(), samples=5)
    assert (summary.open, summary.resolved) == (0, 5)
    assert await real_redis.xlen(keys.shard(0).dlq) == 5  # entries stay: the audit trail


async def all_sent(redis: Redis, keys: KeySpace, ids: list[str]) -> bool:
    states = [await state(redis, keys, delivery_id) for delivery_id in ids]
    return all(s.get("status") == "SENT" for s in states)


async def test_a_dry_run_writes_nothing_and_predicts_the_real_call(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    bodies = [otp(0), otp(1), otp(2), otp(3, ttl_seconds=2), otp(4)]
    ids, _ = await dead_lettered(real_redis, keys, bodies)
    stale = await delivery_of(real_redis, keys, "u-3")
    gone = await delivery_of(real_redis, keys, "u-2")
    left_out = await delivery_of(real_redis, keys, "u-4")
    await real_redis.delete(keys.shard(0).delivery(gone))  # its state expired meanwhile
    await asyncio.sleep(2)  # the stale one's TTL passes
    selection = Selection(delivery_ids=frozenset(ids) - {left_out})

    before = await snapshot(real_redis, key_prefix)
    dry = await replay(real_redis, keys, order(limit=1, selection=selection, dry_run=True))
    assert await snapshot(real_redis, key_prefix) == before
    real = await replay(real_redis, keys, order(limit=1, selection=selection))
    assert len(replayed_ids(real)) == 1
    assert (replayed_ids(dry), skipped(dry)) == (replayed_ids(real), skipped(real))

    before = await snapshot(real_redis, key_prefix)
    dry = await replay(real_redis, keys, order(limit=5, selection=selection, dry_run=True))
    assert await snapshot(real_redis, key_prefix) == before
    real = await replay(real_redis, keys, order(limit=5, selection=selection))
    assert (replayed_ids(dry), skipped(dry)) == (replayed_ids(real), skipped(real))
    assert skipped(real) == {stale: "ttl_passed", gone: "state_expired"}
    assert len(replayed_ids(real)) == 1  # the fourth selected one; the first went before
    assert (await state(real_redis, keys, stale))["status"] == "FAILED"  # never re-sent


async def test_replaying_an_already_sent_delivery_sends_nothing(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    ids, catalog = await dead_lettered(real_redis, keys, [otp(0), otp(1)])
    assert replayed_ids(await replay(real_redis, keys, order(limit=1))) == [ids[0]]
    async with running_worker(real_redis, keys, catalog):
        await wait_until(lambda: all_sent(real_redis, keys, ids[:1]))
    # The second was sent since it was dead-lettered, by whatever path (the check must not
    # trust the entry, only the delivery's state at the time of the replay).
    await real_redis.hset(keys.shard(0).delivery(ids[1]), mapping={"status": "SENT"})
    again = Selection(delivery_ids=frozenset(ids))
    work_items = await real_redis.xlen(keys.shard(0).work(Priority.HIGH))

    report = await replay(real_redis, keys, order(selection=again))
    assert replayed_ids(report) == []
    assert skipped(report) == {ids[1]: "already_sent"}  # the first is resolved: not selected
    async with running_worker(real_redis, keys, catalog):
        await asyncio.sleep(0.5)
    assert await sent_ids(real_redis, keys) == [ids[0]]
    assert await real_redis.xlen(keys.shard(0).work(Priority.HIGH)) == work_items  # nothing queued
    summary = await summarize(real_redis, keys, Selection(), samples=0)
    assert summary.open == 0  # an already-sent entry is settled for good


async def test_a_replay_is_audited_in_redis_and_in_the_read_model(
    real_redis: Redis, key_prefix: str, database_url: str
) -> None:
    keys = KeySpace(key_prefix)
    [delivery_id], _ = await dead_lettered(real_redis, keys, [otp(0)])
    [entry] = await real_redis.xrange(keys.shard(0).dlq)
    failed_version = int(entry[1][b"version"])

    await replay(real_redis, keys, order())

    events = await stream_events(real_redis, keys.shard(0).events)
    [replayed] = [e for e in events if isinstance(e, DeliveryReplayed)]
    assert (replayed.delivery_id, replayed.version) == (delivery_id, failed_version + 1)
    assert (replayed.operator, replayed.reason) == ("anna", "provider outage over")
    mark = json.loads(await real_redis.hget(keys.shard(0).dlq_resolved, entry[0]))
    assert {k: mark[k] for k in ("outcome", "operator", "reason")} == {
        "outcome": "replayed",
        "operator": "anna",
        "reason": "provider outage over",
    }
    written = await state(real_redis, keys, delivery_id)
    assert (written["status"], written["attempts"]) == ("QUEUED", "0")

    pool = await connect(database_url)
    projector = Projector(real_redis, pool, keys, consumer="p")
    task = asyncio.create_task(projector.run())
    try:
        await wait_until(lambda: projected_version(pool, delivery_id, failed_version + 1))
    finally:
        projector.stop()
        await task
    async with pool.acquire() as connection:
        row = await connection.fetchrow(
            "SELECT status, attempts FROM delivery WHERE id = $1", delivery_id
        )
        audit = await connection.fetchval(
            "SELECT body FROM delivery_event WHERE delivery_id = $1 AND type = 'DeliveryReplayed'",
            delivery_id,
        )
    await pool.close()
    assert (row["status"], row["attempts"]) == ("QUEUED", 0)
    assert json.loads(audit)["operator"] == "anna"


async def projected_version(pool: asyncpg.Pool, delivery_id: str, version: int) -> bool:
    async with pool.acquire() as connection:
        found = await connection.fetchval("SELECT version FROM delivery WHERE id = $1", delivery_id)
    return found == version


async def test_poison_and_bug_entries_replay_only_with_force(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    catalog = fast_catalog(attempts=1)
    bug = await accept(
        real_redis, keys, catalog, otp(0, sandbox={"SMS": {"raise_bug": True}}), "bug"
    )
    [bug_id] = [d["id"] for d in bug["deliveries"]]
    await real_redis.xadd(keys.shard(0).work(Priority.HIGH), {"w": b"not a work item"})
    async with running_worker(real_redis, keys, catalog):
        await wait_until(lambda: dlq_length_is(real_redis, keys, 2))

    report = await replay(real_redis, keys, order())
    assert replayed_ids(report) == []
    assert sorted(v.outcome for v in report.skipped) == ["needs_force", "needs_force"]
    assert (await summarize(real_redis, keys, Selection(), samples=0)).open == 2

    forced = await replay(real_redis, keys, order(force=True))
    assert replayed_ids(forced) == [bug_id]
    assert [v.outcome for v in forced.skipped] == ["unreadable"]
    assert (await summarize(real_redis, keys, Selection(), samples=0)).open == 0


async def test_quiet_hours_hold_back_a_replayed_normal_delivery_but_not_high_or_in_app(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    order_body = {
        "recipient": {"id": "u-q", "email": "q@example.com"},
        "type": "order_confirmed",
        "channels": ["EMAIL", "IN_APP"],
        "data": {"order_id": "7"},
    }
    short_lived = {**order_body, "channels": ["EMAIL"], "ttl_seconds": 600}
    bodies = [
        order_body,
        short_lived,
        {**otp(0), "recipient": {"id": "u-q", "phone": "+4915112345678"}},
    ]
    ids, _ = await dead_lettered(real_redis, keys, bodies)
    letters = [
        parse_entry(0, entry_id.decode(), fields)
        for entry_id, fields in await real_redis.xrange(keys.shard(0).dlq)
    ]
    by_kind = {
        (letter.work.channel, letter.work.expires_ms): letter.delivery_id
        for letter in letters
        if letter.work is not None
    }
    [in_app] = [d for (channel, _), d in by_kind.items() if channel == "IN_APP"]
    [sms] = [d for (channel, _), d in by_kind.items() if channel == "SMS"]
    stale_email, email = [d for (channel, _), d in sorted(by_kind.items()) if channel == "EMAIL"]
    # The recipient is inside quiet hours now: from an hour ago until two hours from now (UTC).
    now = datetime.now(UTC)
    window = QuietHoursSetting(
        start=(now - timedelta(hours=1)).strftime("%H:%M"),
        end=(now + timedelta(hours=2)).strftime("%H:%M"),
        timezone="UTC",
    )
    await RecipientSettingsStore(real_redis, keys).set_quiet_hours("u-q", window)
    window_end_ms = int(window_end(window, now).timestamp() * 1000)  # type: ignore[union-attr]
    before = {d: int((await state(real_redis, keys, d))["version"]) for d in ids}

    dry = await replay(real_redis, keys, order(dry_run=True))
    report = await replay(real_redis, keys, order())

    assert (replayed_ids(dry), skipped(dry)) == (replayed_ids(report), skipped(report))
    assert sorted(replayed_ids(report)) == sorted([email, in_app, sms])
    # Its window ends after its 10-minute TTL: it would be stale, so it is not replayed.
    assert skipped(report) == {stale_email: "quiet_hours_past_ttl"}
    waits = {v.letter.delivery_id: v.deferred_until for v in report.replayed}
    assert waits == {email: window_end(window, now), in_app: None, sms: None}
    [shown] = [v for v in replay_view(order(), report).replayed if v.delivery_id == email]
    assert shown.deferred_until == window_end(window, now)
    assert "quiet hours end" in shown.detail
    # The EMAIL waits for the end of the window: replayed, then deferred (two versions).
    held = await state(real_redis, keys, email)
    assert (held["status"], int(held["version"])) == ("SCHEDULED", before[email] + 2)
    assert int(held["due_ms"]) == window_end_ms
    [(member, due)] = await real_redis.zrange(keys.shard(0).delayed, 0, -1, withscores=True)
    assert member.startswith(b"normal ")
    assert email.encode() in member
    assert int(due) == window_end_ms
    # IN_APP and the HIGH SMS go to their work streams at once.
    for delivery_id in (in_app, sms):
        queued = await state(real_redis, keys, delivery_id)
        assert (queued["status"], int(queued["version"])) == ("QUEUED", before[delivery_id] + 1)
    events = [
        event
        for event in await stream_events(real_redis, keys.shard(0).events)
        if getattr(event, "delivery_id", None) == email
    ]
    replayed, deferred = events[-2:]
    assert isinstance(replayed, DeliveryReplayed)
    assert isinstance(deferred, DeliveryDeferred)
    assert (replayed.version, deferred.version) == (before[email] + 1, before[email] + 2)
    assert (deferred.reason, deferred.until) == ("quiet_hours", window_end(window, now))
    summary = await summarize(real_redis, keys, Selection(), samples=0)
    assert (summary.open, summary.resolved) == (0, 4)  # the stale one is settled too


async def test_a_replay_never_sends_to_an_address_suppressed_or_a_recipient_opted_out_since(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    order_body = {
        "recipient": {"id": "u-c", "email": "c@example.com"},
        "type": "order_confirmed",
        "channels": ["EMAIL", "IN_APP"],
        "data": {"order_id": "7"},
    }
    ids, _ = await dead_lettered(real_redis, keys, [order_body, otp(1)])
    email = await delivery_of(real_redis, keys, "u-c", "EMAIL")
    sms = await delivery_of(real_redis, keys, "u-1", "SMS")
    in_app = next(d for d in ids if d not in {email, sms})
    suppressions = SuppressionStore(real_redis, keys)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)

    def on_list(address: str, channel: Channel, reason: str) -> Suppression:
        return Suppression(channel=channel, digest=DIGEST(address), reason=reason,  # type: ignore[arg-type]
                           source="feedback:smtp", at_ms=now_ms)  # fmt: skip

    # The email address complained, the recipient switched order_confirmed off in the app,
    # and the phone number complained too: an OTP may not be opted out of, so it still goes.
    await suppressions.add(on_list("c@example.com", Channel.EMAIL, "complaint"))
    await suppressions.add(on_list("+4915112345678", Channel.SMS, "complaint"))
    settings = RecipientSettingsStore(real_redis, keys)
    off = PreferenceEntry(type="order_confirmed", channel=Channel.IN_APP, enabled=False)
    await settings.set_preferences("u-c", [off])

    dry = await replay(real_redis, keys, order(dry_run=True))
    report = await replay(real_redis, keys, order())
    assert (replayed_ids(dry), skipped(dry)) == (replayed_ids(report), skipped(report))
    assert replayed_ids(report) == [sms]
    assert skipped(report) == {email: "suppressed_complaint", in_app: "opted_out"}
    shown = {v.delivery_id: v.detail for v in replay_view(order(), report).skipped}
    assert "suppression list (complaint)" in shown[email]

    # Neither is final: once lifted, a later replay sends them.
    await suppressions.remove(Channel.EMAIL, DIGEST("c@example.com"), "admin:ops", now_ms)
    await settings.set_preferences("u-c", [])
    again = await replay(real_redis, keys, order())
    assert sorted(replayed_ids(again)) == sorted([email, in_app])
