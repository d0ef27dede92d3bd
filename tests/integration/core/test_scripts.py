"""Each Lua script against the function that lays out its call: one contract test per script.

Every call runs as a Redis user allowed to touch only the keys the call declares, so a
script that reads or writes an undeclared key fails with NOPERM (the same code must run on
a Redis Cluster, where such a key may live on another node). Each test also checks that the
script understood the layout: the reply and the effect are what the arguments asked for.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError, ResponseError

from app.catalog import Catalog
from app.ingest.fanout import Planner
from app.ingest.requests import NotificationRequest
from app.providers.sandbox import _Call, sandbox_send_call
from streams.campaigns.store import CampaignChange, campaign_write_call, encode_chunk
from streams.core import codec, scripts
from streams.core.consumer_groups import DELIVERY_GROUP, PROJECTOR_GROUP, ensure_group
from streams.core.events import (
    AddressSuppressed,
    CampaignStateChanged,
    PreferenceChanged,
    PreferenceEntry,
    ProviderFeedbackReceived,
)
from streams.core.keys import KeySpace, ShardKeys
from streams.core.leases import lease_call
from streams.core.records import decode_record
from streams.core.retention import StreamRetention, trim_stream_call
from streams.core.scripts import Call, LuaScript
from streams.core.vocabulary import Channel, ErrorClass, Priority
from streams.delivery import outcomes as delivery_outcomes
from streams.delivery.address_waits import await_address_call
from streams.delivery.cancellations import cancel_call
from streams.delivery.circuit_breaker import CircuitPolicy, circuit_call
from streams.delivery.delayed import delayed_member, schedule_due_call
from streams.delivery.fairness import Fairness, fair_feed_call
from streams.delivery.leases import Lease, LeasedDelivery, LeaseVerdict
from streams.delivery.parking import Parked, promote_call
from streams.delivery.rate_limiter import Rate, rate_limit_call
from streams.delivery.state_release import release_states_call
from streams.delivery.store import (
    DeliveryStore,
    dead_letter_raw_call,
    delivery_begin_call,
    delivery_finish_call,
)
from streams.delivery.throttles import throttle_call
from streams.digests.closing import (
    Sealed,
    digest_close_call,
    digest_seal_call,
    digest_take_call,
)
from streams.digests.store import (
    AGAIN,
    NEW,
    OPEN,
    DigestJoin,
    JoinAsk,
    digest_join_call,
    digest_leave_call,
    joined_hour,
    open_digest_key,
)
from streams.dlq.entries import Worker, parse_entry, poison_entry
from streams.dlq.replay import Candidate, ReplayOrder, dlq_replay_call
from streams.dlq.scan import Selection
from streams.feedback.store import (
    Feedback,
    VerifiedCallback,
    feedback_apply_call,
    feedback_take_call,
)
from streams.inbox.marks import changed as inbox_changed
from streams.inbox.marks import inbox_mark_call
from streams.inbox.messages import InboxMessage
from streams.inbox.messages import decode as decode_inbox_message
from streams.inbox.pages import PageAsk, inbox_page_call
from streams.inbox.revocation import inbox_revoke_call
from streams.inbox.store import InboxStore
from streams.ingest.quota import QuotaRates, ingest_quota_call
from streams.ingest.writer import IngestItem, ingest_call
from streams.recipients.erase import erase_call, find_waiting
from streams.recipients.read import RecipientSettings, recipients_read_call
from streams.recipients.settings import RecipientSettingsStore, recipient_settings_call
from streams.recipients.suppressions import Suppression, suppression_call
from streams.status_webhooks.outbox import (
    DueStatus,
    GivenUp,
    OutboxEntry,
    status_dead_letter_call,
    status_outbox_append_call,
)
from tests.conftest import (
    DIGEST,
    REPO,
    Clock,
    connect_test_redis,
    notification_id,
    on_every_node,
)

WORKER = Worker("contract-worker", "test")
ORDER = {
    "recipient": {"id": "user-1", "email": "anna@example.com"},
    "type": "order_confirmed",
    "data": {"order_id": "A-1"},
}
# Its two work items (EMAIL, IN_APP) share data this large (``streams.delivery.work_items``).
LARGE_ORDER = {**ORDER, "data": {"order_id": "A-1", "note": "n" * 400}}


@asynccontextmanager
async def declared_only(admin: Redis, call: Call) -> AsyncIterator[Redis]:
    """A client of a Redis user that may touch exactly the keys ``call`` declares."""
    user, password = f"contract-{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    patterns = [f"~{_glob_escape(key)}" for key in call[0]]
    await on_every_node(
        admin,
        # Channels are no keys (a cluster broadcasts PUBLISH): any channel is allowed.
        "ACL",
        "SETUSER",
        user,
        "on",
        f">{password}",
        "resetkeys",
        "allchannels",
        "+@all",
        *patterns,
    )
    client = connect_test_redis(username=user, password=password)
    try:
        yield client
    finally:
        await client.aclose()
        await on_every_node(admin, "ACL", "DELUSER", user)


async def run(admin: Redis, script: LuaScript, call: Call) -> Any:
    """Run ``call`` as a user allowed only its declared keys."""
    async with declared_only(admin, call) as client:
        return await script(client, *call)


def _glob_escape(key: Any) -> str:
    text = key.decode() if isinstance(key, bytes) else str(key)
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def plan(catalog: Catalog, keys: KeySpace, key: str, body: dict[str, Any]) -> IngestItem:
    """What ingest would write for ``body`` under idempotency key ``key``."""
    planner, shard = Planner(catalog, DIGEST), keys.shard(0)
    request = msgspec.convert(body, NotificationRequest)
    return planner.plan(
        shard=shard,
        producer="orders",
        idempotency_key=key,
        request=request,
        identity=planner.identity(shard, request),
        settings=RecipientSettings(),
        now=datetime.now(UTC),  # not a test clock: the scripts read Redis's
    )


async def leased(
    redis: Redis, keys: KeySpace, catalog: Catalog, body: dict[str, Any] = ORDER
) -> list[LeasedDelivery]:
    """Ingest an order (EMAIL and IN_APP), read its NORMAL work entries and lease them."""
    item = plan(catalog, keys, "lease", body)
    await scripts.INGEST(redis, *ingest_call(keys.shard(0), [item], 60_000, 10_000, 2000))
    shard, stream = keys.shard(0), keys.shard(0).work(Priority.NORMAL)
    await ensure_group(redis, stream, DELIVERY_GROUP)
    [(_, entries)] = await redis.xreadgroup(DELIVERY_GROUP, "w", {stream: ">"})
    items = [(e.decode(), codec.decode_work_item(f[b"w"])) for e, f in entries]
    leases = await DeliveryStore(redis).begin(
        shard, Priority.NORMAL, items, "w", lease_ms=60_000, max_leases=5
    )
    return [
        LeasedDelivery.taken(shard, item, entry_id, lease, WORKER)
        for (entry_id, item), lease in zip(items, leases, strict=True)
    ]


async def test_a_call_touching_an_undeclared_key_is_refused(
    real_redis: Redis, key_prefix: str
) -> None:
    """The guard itself: a script reaching past its declared keys fails."""
    declared, other = f"{key_prefix}:{{t}}:a", f"{key_prefix}:{{t}}:b"
    async with declared_only(real_redis, ([declared], [])) as client:
        assert await client.eval("return redis.call('GET', KEYS[1])", 1, declared) is None
        with pytest.raises((NoPermissionError, ResponseError), match=r"(?i)perm|access"):
            await client.eval(f"return redis.call('GET', '{other}')", 1, declared)


def test_every_script_starts_with_the_shared_functions() -> None:
    for script in scripts.ALL:
        assert script.source.startswith(scripts.PRELUDE), script.name


async def test_ingest_ingest(real_redis: Redis, key_prefix: str, catalog: Catalog) -> None:
    keys = KeySpace(key_prefix)
    items = [plan(catalog, keys, "k0", ORDER), plan(catalog, keys, "k1", LARGE_ORDER)]
    assert (items[0].shared_data, bool(items[1].shared_data)) == (b"", True)
    call = ingest_call(keys.shard(0), items, 60_000, 10_000, 2000)

    assert await run(real_redis, scripts.INGEST, call) == [b"OK", b"OK"]
    assert await real_redis.xlen(keys.shard(0).work(Priority.NORMAL)) == 4  # EMAIL, IN_APP
    data = keys.shard(0).data(items[1].notification_id)
    assert await real_redis.hgetall(data) == {b"d": items[1].shared_data, b"n": b"2"}
    assert await real_redis.pttl(data) > 0
    # A retry is planned afresh, with new ids; it is answered with the first notification's
    # id, whose record is not among the keys the retry declares.
    retries = [plan(catalog, keys, "k0", ORDER), plan(catalog, keys, "k1", LARGE_ORDER)]
    again = await run(
        real_redis, scripts.INGEST, ingest_call(keys.shard(0), retries, 60_000, 10_000, 2000)
    )
    assert again == [[b"DUP", item.notification_id.encode()] for item in items]


def joining(item: IngestItem, shard: ShardKeys, digest: str, how: str) -> IngestItem:
    """``item`` joining digest ``digest`` (of at most 2 items) as the ingest script accepts it."""
    ask = JoinAsk(
        notification_id=item.notification_id, recipient_id="u-1", notification_type="comment",
        key="A-17", producer="orders", locale="en", recipient=b'{"id":"u-1"}', item=b"{}",
        closes_ms=10_000, max_items=2, again=False,
    )  # fmt: skip
    join = DigestJoin(
        ask=ask, open_key=open_digest_key(shard, "u-1", "comment", "A-17"), digest_id=digest,
        how=how, now_ms=1_000, events=shard.events,
    )  # fmt: skip
    return msgspec.structs.replace(item, join=join)


async def test_ingest_ingest_joining_digests(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)

    async def ingest(*items: IngestItem) -> Any:
        return await run(real_redis, scripts.INGEST, ingest_call(shard, items, 60_000, 10_000, 9))

    first = joining(plan(catalog, keys, "j0", ORDER), shard, "d-1", NEW)
    assert await ingest(first) == [[b"JOINED", b"d-1", 1, 10_000]]
    assert await real_redis.get(first.join.open_key) == b"d-1 10000"  # type: ignore[union-attr]
    # A wrong guess: nothing of it written, and the digest open named.
    planned = plan(catalog, keys, "j1", {**ORDER, "cancellation_key": "c-1"})
    assert await ingest(joining(planned, shard, "d-2", NEW)) == [[b"DIGEST", b"d-1"]]
    assert await real_redis.get(shard.notification(planned.notification_id)) is None
    # Planned again with it (and with a cancellation key): joined; the second fills it.
    assert await ingest(joining(planned, shard, "d-1", OPEN)) == [[b"JOINED", b"d-1", 2, 1_000]]
    assert await real_redis.get(shard.notification(planned.notification_id)) is not None
    entries = await real_redis.lrange(shard.digest_items("d-1"), 0, -1)
    assert [e.split(b" ")[0].decode() for e in entries] == [
        first.notification_id,
        planned.notification_id,
    ]
    # Its record names the digest, and nothing else records the join.
    record = await real_redis.get(shard.notification(planned.notification_id))
    assert decode_record(record).digest_id == "d-1"
    assert decode_record(record).cancellation_key == "c-1"
    assert not await real_redis.exists(shard.digest_joined(joined_hour(planned.notification_id)))
    # Sealed when full: the next one asking for it is sent to open a new one, in one call
    # with one joining nothing.
    late, plain = plan(catalog, keys, "j2", ORDER), plan(catalog, keys, "j3", ORDER)
    assert await ingest(joining(late, shard, "d-1", OPEN), plain) == [[b"DIGEST", b""], b"OK"]


async def test_delivery_begin(real_redis: Redis, key_prefix: str, catalog: Catalog) -> None:
    keys = KeySpace(key_prefix)
    items = [plan(catalog, keys, "b0", ORDER), plan(catalog, keys, "b1", LARGE_ORDER)]
    await scripts.INGEST(real_redis, *ingest_call(keys.shard(0), items, 60_000, 10_000, 2000))
    stream = keys.shard(0).work(Priority.NORMAL)
    work = [
        (e.decode(), codec.decode_work_item(f[b"w"])) for e, f in await real_redis.xrange(stream)
    ]
    # A fifth entry was read, but its delivery ended through another entry and its state was
    # released since: the entry is gone from the stream, and there is no state.
    gone = ("1-1", msgspec.structs.replace(work[0][1], delivery_id="gone"))
    call = delivery_begin_call(keys.shard(0), Priority.NORMAL, [*work, gone], "w", (60_000, 5))

    reply = await run(real_redis, scripts.DELIVERY_BEGIN, call)

    assert len(reply) == 6 * (len(work) + 1)  # six values per delivery
    assert reply[0::6] == [b"GO"] * len(work) + [b"TERMINAL"]
    assert reply[5::6] == [b"", b"", items[1].shared_data, items[1].shared_data, b""]
    state = await DeliveryStore(real_redis).state(keys.shard(0), work[0][1].delivery_id)
    assert state is not None
    assert (state.status, state.lease_owner, state.channel) == ("SENDING", "w", work[0][1].channel)
    assert state.leases == 1
    assert not await real_redis.exists(keys.shard(0).delivery("gone"))


async def test_delivery_begin_and_finish_of_a_cancelled_campaign(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    """A campaign's marker is declared once per call, and only by items of a campaign; a
    cancelled one's deliveries are recorded CANCELLED, their work entries gone."""
    keys = KeySpace(key_prefix)
    shard, stream = keys.shard(0), keys.shard(0).work(Priority.NORMAL)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    email = codec.decode_work_item(plan(catalog, keys, "c", ORDER).work[0].item)
    for n, campaign in enumerate(["c-1", "c-1", "c-2", ""]):
        item = msgspec.structs.replace(email, delivery_id=f"d-{n}", campaign=campaign)
        await real_redis.xadd(stream, {"w": codec.encode(item)})
    [(_, entries)] = await real_redis.xreadgroup(DELIVERY_GROUP, "w", {stream: ">"})
    work = [(e.decode(), codec.decode_work_item(f[b"w"])) for e, f in entries]
    await real_redis.set(shard.campaign_cancelled("c-1"), "1")
    call = delivery_begin_call(shard, Priority.NORMAL, work, "w", (60_000, 5))
    markers = [shard.campaign_cancelled("c-1"), shard.campaign_cancelled("c-2")]
    assert [key for key in call[0] if str(key).endswith(":cancelled")] == markers

    reply = await run(real_redis, scripts.DELIVERY_BEGIN, call)

    assert reply[0::6] == [b"CANCELLED", b"CANCELLED", b"GO", b"GO"]
    lease = Lease(LeaseVerdict.CANCELLED, version=1, attempts=0, now_ms=1_000, first_attempt_ms=0)
    outcomes = [
        delivery_outcomes.cancelled(LeasedDelivery.taken(shard, item, entry, lease, WORKER), 1_000)
        for entry, item in work[:2]
    ]
    call = delivery_finish_call(shard, Priority.NORMAL, outcomes, (60_000, 120_000))
    assert await run(real_redis, scripts.DELIVERY_FINISH, call) == [b"OK", b"OK"]
    for _, item in work[:2]:
        assert await real_redis.hget(shard.delivery(item.delivery_id), "status") == b"CANCELLED"
    assert await real_redis.xlen(stream) == 2  # the other two are still being sent
    [(_, fields)] = await real_redis.xrange(shard.events)
    assert [type(e).__name__ for e in codec.decode_events(fields[b"e"])] == [
        "DeliveryCancelled", "DeliveryCancelled",
    ]  # fmt: skip


async def test_delivery_finish(real_redis: Redis, key_prefix: str, catalog: Catalog) -> None:
    keys = KeySpace(key_prefix)
    held = await leased(real_redis, keys, catalog, LARGE_ORDER)
    data = keys.shard(0).data(held[0].item.notification_id)
    outcomes = [
        delivery_outcomes.sent(held[0], "sandbox", "m-1", 1_000),
        delivery_outcomes.failed(held[1], ErrorClass.PERMANENT, "no", 1_000, attempts=1),
    ]
    call = delivery_finish_call(keys.shard(0), Priority.NORMAL, outcomes, (60_000, 120_000))

    assert await run(real_redis, scripts.DELIVERY_FINISH, call) == [b"OK", b"OK"]
    [entry] = await real_redis.xrange(keys.shard(0).dlq)
    assert parse_entry(0, entry[0].decode(), entry[1]).delivery_id == held[1].item.delivery_id
    assert await real_redis.pttl(keys.shard(0).delivery(held[1].item.delivery_id)) > 60_000
    pending = await real_redis.xpending(keys.shard(0).work(Priority.NORMAL), DELIVERY_GROUP)
    assert pending["pending"] == 0
    assert await real_redis.xlen(keys.shard(0).work(Priority.NORMAL)) == 0  # deleted too
    assert await real_redis.exists(data) == 0  # both deliveries ended: the data went


async def test_delivery_dead_letter_raw(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    shard, stream = keys.shard(0), keys.shard(0).work(Priority.LOW)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    await real_redis.xadd(stream, {"w": b"not a work item"})
    [(_, [(entry_id, fields)])] = await real_redis.xreadgroup(DELIVERY_GROUP, "w", {stream: ">"})
    entry = poison_entry(entry_id.decode(), fields, reason="undecodable", worker=WORKER)
    call = dead_letter_raw_call(shard, Priority.LOW, entry_id.decode(), entry)

    assert await run(real_redis, scripts.DEAD_LETTER_RAW, call) == 1  # acknowledged
    assert await real_redis.xlen(stream) == 0
    [(_, raw)] = await real_redis.xrange(shard.dlq)
    assert raw[b"raw_w"] == b"not a work item"
    assert raw[b"error_class"] == b"POISON"


async def test_delivery_schedule_due(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    now_ms = int(time.time() * 1000)
    await real_redis.zadd(
        shard.delayed,
        {
            delayed_member(Priority.HIGH, b"due"): now_ms - 1_000,
            b"nonsense": now_ms - 1_000,
            delayed_member(Priority.LOW, b"later"): now_ms + 60_000,
        },
    )

    moved, next_due_in = await run(real_redis, scripts.SCHEDULE_DUE, schedule_due_call(shard, 10))

    assert moved == 2  # the readable member to its stream, the other to the dead letters
    assert 55_000 < next_due_in <= 60_000  # by the Redis clock
    [(_, fields)] = await real_redis.xrange(shard.work(Priority.HIGH))
    assert fields == {b"w": b"due"}
    [(_, parked)] = await real_redis.xrange(shard.dlq)
    assert parked[b"member"] == b"nonsense"


async def test_delivery_await_address(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    now_ms = int(time.time() * 1000)
    member = delayed_member(Priority.NORMAL, b'["waits"]')
    await real_redis.zadd(shard.delayed, {member: now_ms + 30_000})
    await real_redis.hset(shard.recipient("user-1"), "v", 2)

    waiting = (member, now_ms + 60_000, 2)
    assert (
        await run(real_redis, scripts.AWAIT_ADDRESS, await_address_call(shard, "user-1", waiting))
        == 0
    )
    assert await real_redis.zscore(shard.awaiting("user-1"), member) == now_ms + 60_000
    assert await real_redis.zscore(shard.delayed, member) == now_ms + 30_000

    released = await run(real_redis, scripts.AWAIT_ADDRESS, await_address_call(shard, "user-1"))

    assert released == 1
    assert await real_redis.zscore(shard.delayed, member) <= time.time() * 1000
    assert not await real_redis.exists(shard.awaiting("user-1"))


async def test_recipients_settings(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix, shards=2)
    home = keys.home_of_recipient("user-1")
    event = PreferenceChanged(
        at=Clock().now,
        recipient_id="user-1",
        settings_version=1,
        preferences=[PreferenceEntry(type="marketing", channel=Channel.EMAIL, enabled=False)],
    )
    call = recipient_settings_call(
        home, "user-1", "preferences", "marketing:EMAIL", expected_version=0, new_version=1,
        event=event,
    )  # fmt: skip
    assert await run(real_redis, scripts.RECIPIENT_SETTINGS, call) == b"OK"
    copy = keys.shard(1 - home.shard)
    flat = msgspec.json.encode(["v", "1", "p:marketing:EMAIL", "0"]).decode()
    call = recipient_settings_call(copy, "user-1", "copy", flat, expected_version=0, new_version=1)
    assert await run(real_redis, scripts.RECIPIENT_SETTINGS, call) == b"OK"

    for shard in (home, copy):
        settings = RecipientSettings.from_hash(await real_redis.hgetall(shard.recipient("user-1")))
        assert (settings.version, settings.disabled) == (1, {("marketing", "EMAIL")})
    assert await real_redis.xlen(home.events) == 1  # the home shard records the event

    # One pair switched off, the others kept.
    call = recipient_settings_call(
        home, "user-1", "preference_off", "order_confirmed:EMAIL", expected_version=1,
        new_version=2, event=event,
    )  # fmt: skip
    assert await run(real_redis, scripts.RECIPIENT_SETTINGS, call) == b"OK"
    settings = RecipientSettings.from_hash(await real_redis.hgetall(home.recipient("user-1")))
    assert settings.disabled == {("marketing", "EMAIL"), ("order_confirmed", "EMAIL")}


async def test_recipients_suppression(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix, shards=2)
    entry = Suppression(
        channel=Channel.EMAIL, digest="ab" * 16, reason="complaint", source="admin:ops", at_ms=1
    )
    home = keys.home_of_address(entry.digest)
    copy = keys.shard(1 - home.shard)
    event = AddressSuppressed(
        at=Clock().now, channel=Channel.EMAIL, address_digest=entry.digest, reason="complaint",
        source="admin:ops",
    )  # fmt: skip
    call = suppression_call(home, "add", entry.field, entry.value(), event)
    assert await run(real_redis, scripts.SUPPRESSION, call) == 1
    call = suppression_call(copy, "add", entry.field, entry.value(), None)
    assert await run(real_redis, scripts.SUPPRESSION, call) == 1
    for shard in (home, copy):
        assert await real_redis.hget(shard.suppressions, entry.field) == entry.value().encode()
        assert await real_redis.hget(shard.suppressions, "#v") == b"1"
    assert (await real_redis.xlen(home.events), await real_redis.xlen(copy.events)) == (1, 0)
    call = suppression_call(copy, "remove", entry.field, "", None)
    assert await run(real_redis, scripts.SUPPRESSION, call) == 1
    assert await run(real_redis, scripts.SUPPRESSION, call) == 0  # already off: no new version
    assert await real_redis.hget(copy.suppressions, "#v") == b"2"


async def test_recipients_erase(real_redis: Redis, key_prefix: str, catalog: Catalog) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    item = plan(catalog, keys, "erase", ORDER)
    await scripts.INGEST(real_redis, *ingest_call(shard, [item], 60_000, 10_000, 2000))
    waiting = await find_waiting(real_redis, shard, ORDER["recipient"]["id"])
    assert len(waiting) == 2  # EMAIL and IN_APP, queued (no push token: PUSH is suppressed)
    call = erase_call(shard, waiting, [1] * len(waiting), 1_700_000_000_000, 60_000)
    assert await run(real_redis, scripts.ERASE, call) == [b"ERASED"] * 2
    for stream in shard.work_streams:
        assert await real_redis.xlen(stream) == 0
    state = await DeliveryStore(real_redis).state(shard, waiting[0].item.delivery_id)
    assert state is not None
    assert (state.status, state.reason, state.version) == ("SUPPRESSED", "erased", 2)


async def test_feedback_take(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    item = Feedback(provider="sms", feedback_id="f", message_id="SM1", kind="delivered")
    call = feedback_take_call(keys, [VerifiedCallback("sms", "f", 60_000, [item])])
    assert await run(real_redis, scripts.FEEDBACK_TAKE, call) == [1]
    assert await run(real_redis, scripts.FEEDBACK_TAKE, call) == [0]
    assert await real_redis.xlen(keys.feedback_inbox) == 1


async def test_feedback_apply(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    await real_redis.hset(shard.delivery("d"), mapping={"status": "SENT", "version": 2})
    event = ProviderFeedbackReceived(
        at=Clock().now, notification_id="n", delivery_id="d", version=3, feedback="delivered",
        provider="sms", status="DELIVERED", feedback_id="f",
    )  # fmt: skip
    call = feedback_apply_call(
        shard, [("f", 2, {"status": "DELIVERED", "version": 3}, event)], 1000
    )
    assert await run(real_redis, scripts.FEEDBACK_APPLY, call) == [b"OK"]
    assert await real_redis.hget(shard.delivery("d"), "status") == b"DELIVERED"


async def test_delivery_sandbox_send(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    fields = ("sent", "sandbox-1", "d-1", "d-1", "EMAIL", "anna@example.com", 1)
    calls = [_Call(keys.sandbox_done("d-1"), fields), _Call(keys.sandbox_done("d-1"), fields)]
    call = sandbox_send_call(keys, True, 60_000, calls)

    reply = await run(real_redis, scripts.SANDBOX_SEND, call)

    assert reply == [[b"sandbox-1", b"0"], [b"sandbox-1", b"1"]]  # the repeat is a duplicate
    assert await real_redis.xlen(keys.sandbox_sent) == 2


async def test_delivery_rate_limit(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    rate = Rate(per_second=1, burst=2)
    requests: Sequence[tuple[str, Rate, Priority]] = [
        ("smtp", rate, Priority.HIGH),
        ("smtp", rate, Priority.HIGH),
        ("smtp", rate, Priority.LOW),
    ]
    reply = await run(real_redis, scripts.RATE_LIMIT, rate_limit_call(keys, "smtp", rate, requests))
    assert reply[:2] == [0, 0]  # the burst of two
    assert reply[2] > 0  # the third waits


async def test_delivery_throttle(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    requests = [
        ("user-1", "t:otp", 2, 60_000, "d1"),
        ("user-1", "default:EMAIL", 1, 60_000, "d2"),
        ("user-1", "t:otp", 2, 60_000, "d3"),
        ("user-1", "t:otp", 2, 60_000, "d4"),
        ("user-1", "t:otp", 2, 60_000, "d1"),  # counted already
    ]
    reply = await run(real_redis, scripts.THROTTLE, throttle_call(keys, "user-1", requests))
    assert reply[:3] == [0, 0, 0]
    assert 59_000 < reply[3] <= 60_000  # the oldest leaves the window in about a minute
    assert reply[4] == 0
    assert await real_redis.zcard(keys.throttle("user-1", "t:otp")) == 2


async def test_ingest_quota(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    rates = QuotaRates(
        requests_per_second=1, requests_burst=1, notifications_per_second=10, notifications_burst=5
    )
    call = ingest_quota_call(keys, "orders", rates, 5)
    assert await run(real_redis, scripts.INGEST_QUOTA, call) == 0
    assert await run(real_redis, scripts.INGEST_QUOTA, call) > 0  # both buckets are full
    assert await real_redis.exists(*call[0]) == 2


async def test_delivery_circuit(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    policy = CircuitPolicy(failure_share=0.5, min_calls=2, window_seconds=10, open_seconds=5)
    call = circuit_call(keys, "smtp", policy, "report", 2, 2)
    reply = await run(real_redis, scripts.CIRCUIT, call)
    assert reply[0] == b"open"
    assert await real_redis.exists(*call[0]) == 1


async def test_core_trim_stream(real_redis: Redis, key_prefix: str) -> None:
    stream = KeySpace(key_prefix).shard(0).events
    for ms in (1_000, 2_000, 3_000):
        await real_redis.xadd(stream, {"e": b"[]"}, id=f"{ms}-0")
    await ensure_group(real_redis, stream, PROJECTOR_GROUP)
    await real_redis.xreadgroup(PROJECTOR_GROUP, "p", {stream: ">"})
    policy = StreamRetention(stream, 60_000, (PROJECTOR_GROUP,))

    trim = trim_stream_call(policy)
    assert await run(real_redis, scripts.TRIM_STREAM, trim) == [0, b"1000-0", b""]  # pending

    await real_redis.xack(stream, PROJECTOR_GROUP, "1000-0", "2000-0", "3000-0")
    removed, _, _ = await run(real_redis, scripts.TRIM_STREAM, trim)
    assert removed == 3


async def test_dlq_replay(real_redis: Redis, key_prefix: str, catalog: Catalog) -> None:
    keys = KeySpace(key_prefix)
    [email, _] = await leased(real_redis, keys, catalog)
    failed = delivery_outcomes.failed(email, ErrorClass.TRANSIENT, "down", 1_000, attempts=1)
    await DeliveryStore(real_redis).finish([failed])
    [(entry_id, fields)] = await real_redis.xrange(keys.shard(0).dlq)
    letter = parse_entry(0, entry_id.decode(), fields)
    assert letter.version is not None
    order = ReplayOrder(selection=Selection(), limit=10, operator="anna", reason="fixed")
    candidate = Candidate(letter, letter.version, superseded=False, quiet_end=None)
    call = dlq_replay_call(
        keys.shard(0), order, 10, Clock().now, [candidate], address_digest=DIGEST
    )

    assert await run(real_redis, scripts.DLQ_REPLAY, call) == [b"replayed"]
    state = await DeliveryStore(real_redis).state(keys.shard(0), email.item.delivery_id)
    assert state is not None
    assert (state.status, state.version, state.attempts) == ("QUEUED", letter.version + 1, 0)
    queued = await real_redis.xrange(keys.shard(0).work(Priority.NORMAL))
    replayed = codec.decode_work_item(queued[-1][1][b"w"])
    assert (replayed.delivery_id, replayed.attempts) == (email.item.delivery_id, 0)
    assert await real_redis.hexists(keys.shard(0).dlq_resolved, entry_id)


async def test_core_lease(real_redis: Redis, key_prefix: str) -> None:
    lease = f"{key_prefix}:{{hooks}}:lease"
    assert await run(real_redis, scripts.LEASE, lease_call(lease, "take", "a", 60_000)) == 1
    assert await run(real_redis, scripts.LEASE, lease_call(lease, "take", "b", 60_000)) == 0
    assert await run(real_redis, scripts.LEASE, lease_call(lease, "release", "b", 0)) == 0
    assert await run(real_redis, scripts.LEASE, lease_call(lease, "release", "a", 0)) == 1
    assert await real_redis.exists(lease) == 0


async def test_status_webhooks_outbox_append(real_redis: Redis, key_prefix: str) -> None:
    hooks = KeySpace(key_prefix).status_webhooks("orders")
    statuses = [DueStatus("5-1", "d1", 3, b'{"a":1}'), DueStatus("6-0", "d2", 2, b'{"b":2}')]
    call = status_outbox_append_call(hooks, 0, statuses)
    assert await run(real_redis, scripts.STATUS_OUTBOX_APPEND, call) == -1  # no webhook
    await real_redis.set(hooks.config, b"{}")

    assert await run(real_redis, scripts.STATUS_OUTBOX_APPEND, call) == 2
    assert await run(real_redis, scripts.STATUS_OUTBOX_APPEND, call) == 0  # read again: once
    [(_, first), _] = await real_redis.xrange(hooks.outbox)
    assert first == {b"d": b"d1", b"v": b"3", b"b": b'{"a":1}'}
    assert await real_redis.hget(hooks.positions, "0") == b"6-0"


async def test_status_webhooks_dead_letter(real_redis: Redis, key_prefix: str) -> None:
    hooks = KeySpace(key_prefix).status_webhooks("orders")
    entry_id = (await real_redis.xadd(hooks.outbox, {"d": "d1", "v": 3, "b": b"{}"})).decode()
    entry = OutboxEntry(entry_id, "d1", 3, b"{}")
    why = GivenUp(attempts=4, first_attempt_ms=1, last_attempt_ms=2, status_code=503, error="x")
    call = status_dead_letter_call(hooks, entry, 60_000, why)

    assert await run(real_redis, scripts.STATUS_DEAD_LETTER, call) == 1
    assert await run(real_redis, scripts.STATUS_DEAD_LETTER, call) == 0  # already moved
    assert await real_redis.xlen(hooks.outbox) == 0
    [(_, letter)] = await real_redis.xrange(hooks.dlq)
    assert (letter[b"webhook_id"], letter[b"status_code"]) == (b"d1.3", b"503")
    assert 0 < await real_redis.pttl(hooks.dlq) <= 60_000


async def test_delivery_cancel(real_redis: Redis, key_prefix: str, catalog: Catalog) -> None:
    keys = KeySpace(key_prefix)
    later = {**ORDER, "delay": 3600, "cancellation_key": "order-1"}
    item = plan(catalog, keys, "later", later)
    shard = keys.shard(0)
    await scripts.INGEST(real_redis, *ingest_call(shard, [item], 60_000, 10_000, 2000))
    record = decode_record(await real_redis.get(shard.notification(item.notification_id)))
    planned = [(record, delivery) for delivery in record.deliveries]
    call = cancel_call(
        shard, planned, by="orders", key="", reason="cancelled", projected={},
        retention_ms=60_000, now=datetime.now(UTC),
    )  # fmt: skip

    after = [b"CANCELLED" if d.status == "SCHEDULED" else d.status.encode() for _, d in planned]
    assert b"CANCELLED" in after
    assert await run(real_redis, scripts.CANCEL, call) == after
    assert await real_redis.zcard(shard.delayed) == 0
    assert await run(real_redis, scripts.CANCEL, call) == after


async def test_delivery_promote(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    item = b'low ["d-1","n-1","marketing","EMAIL","LOW","u","a@b.c","en"]'
    call = promote_call(shard, [Parked("d-1", 5_000, item)])

    assert await run(real_redis, scripts.PROMOTE, call) == 1
    assert await real_redis.zscore(shard.delayed, item) == 5_000


async def test_delivery_release_states(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    states = {
        "sent": {"status": "SENT", "version": 3},  # projected: released
        "moved": {"status": "DELIVERED", "version": 5},  # changed since: kept
        "failed": {"status": "FAILED", "version": 4},  # its dead letter needs it: kept
        "sending": {"status": "SENDING", "version": 2},  # never ended: kept
    }
    for delivery_id, fields in states.items():
        await real_redis.hset(shard.delivery(delivery_id), mapping=fields)
        await real_redis.pexpire(shard.delivery(delivery_id), 86_400_000)
    await real_redis.set(shard.delivery("not-a-hash"), "x")
    projected = {"sent": 3, "moved": 4, "failed": 4, "sending": 2, "not-a-hash": 1, "gone": 2}
    call = release_states_call(shard, projected, 60_000)

    assert await run(real_redis, scripts.RELEASE_STATES, call) == 1
    assert 0 < await real_redis.pttl(shard.delivery("sent")) <= 60_000
    for kept in ("moved", "failed"):
        assert await real_redis.pttl(shard.delivery(kept)) > 60_000
    assert await real_redis.pttl(shard.delivery("sending")) > 60_000
    assert await real_redis.exists(shard.delivery("gone")) == 0
    # A lifetime only gets shorter; 0 lets the state go at once.
    assert (
        await run(
            real_redis, scripts.RELEASE_STATES, release_states_call(shard, projected, 120_000)
        )
        == 1
    )
    assert await real_redis.pttl(shard.delivery("sent")) <= 60_000
    assert (
        await run(real_redis, scripts.RELEASE_STATES, release_states_call(shard, projected, 0)) == 1
    )
    assert await real_redis.exists(shard.delivery("sent")) == 0


async def in_the_inbox(redis: Redis, keys: KeySpace, catalog: Catalog) -> LeasedDelivery:
    """The order's IN_APP delivery, sent into its recipient's inbox through delivery_finish."""
    [in_app] = [
        held for held in await leased(redis, keys, catalog) if held.item.channel == "IN_APP"
    ]
    message = InboxMessage(
        id=in_app.item.delivery_id, notification_id=in_app.item.notification_id,
        type=in_app.item.notification_type, title="t", body="b",
        created_at=datetime.fromtimestamp(1, UTC),
    )  # fmt: skip
    outcome = delivery_outcomes.sent_to_inbox(
        in_app, "inbox", message, 1_000, keep=10, ttl_ms=60_000, feed=(100, 30_000)
    )
    call = delivery_finish_call(keys.shard(0), Priority.NORMAL, [outcome], (60_000, 120_000))
    assert await run(redis, scripts.DELIVERY_FINISH, call) == [b"OK"]
    inbox = keys.shard(0).inbox(in_app.item.recipient_id)
    assert 0 < await redis.pttl(inbox.feed) <= 30_000  # the feed's own lifetime
    assert 30_000 < await redis.pttl(inbox.messages) <= 60_000
    [(newest, _)] = await redis.xrange(inbox.feed)
    assert await redis.hget(inbox.messages, "feed") == newest
    return in_app


async def test_inbox_page(real_redis: Redis, key_prefix: str, catalog: Catalog) -> None:
    keys = KeySpace(key_prefix)
    in_app = await in_the_inbox(real_redis, keys, catalog)
    asks = [
        PageAsk(keys.shard(0), in_app.item.recipient_id, "", 5, "inbox"),
        PageAsk(keys.shard(0), "someone-else", "", 5, "unread"),
    ]
    [reply, other] = await run(real_redis, scripts.INBOX_PAGE, inbox_page_call(asks))
    assert other == [b"0", b"0"]
    assert reply[:2] == [b"1", b"1"]  # unread, unseen
    assert (reply[2].decode(), reply[4]) == (in_app.item.delivery_id, b"0 0 0 3")
    assert decode_inbox_message(reply[3]).title == "t"
    # A token's epoch is checked against the recipient's: older is refused, nothing read.
    revoked = keys.shard(0).inbox(in_app.item.recipient_id).revoked
    await real_redis.set(revoked, 1_000)
    asks = [PageAsk(keys.shard(0), in_app.item.recipient_id, "", 5, "inbox", epoch)
            for epoch in (999, 1_000)]  # fmt: skip
    assert await run(real_redis, scripts.INBOX_PAGE, inbox_page_call(asks)) == [[b"revoked"], reply]


async def test_inbox_revoke(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    key = keys.shard(0).inbox("u-1").revoked
    async with real_redis.pubsub() as pubsub:
        await pubsub.subscribe(keys.inbox_live)
        first = await run(
            real_redis, scripts.INBOX_REVOKE, inbox_revoke_call(key, keys.inbox_live, "u-1")
        )
        again = await run(
            real_redis, scripts.INBOX_REVOKE, inbox_revoke_call(key, keys.inbox_live, "u-1")
        )
        assert first > 1_700_000_000_000  # the Redis clock in ms
        assert again > first
        assert await real_redis.get(key) == str(again).encode()
        published = []
        for _ in range(10):  # at most 20 s
            if len(published) == 2:
                break
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
            if message is not None:
                published.append(message["data"])
    assert published == [b"\x1frevoked\x1fu-1"] * 2


async def test_inbox_mark(real_redis: Redis, key_prefix: str, catalog: Catalog) -> None:
    keys = KeySpace(key_prefix)
    in_app = await in_the_inbox(real_redis, keys, catalog)
    shard, recipient = keys.shard(0), in_app.item.recipient_id
    store = InboxStore(real_redis, keys)
    stored = await store.message(recipient, in_app.item.delivery_id)
    assert stored is not None
    change = inbox_changed("read", stored, recipient, "3", 2_000)
    assert change is not None
    inbox = shard.inbox(recipient)
    await real_redis.delete(inbox.feed)  # it expired since the message came
    call = inbox_mark_call(shard, recipient, [change], (100, 20_000), keys.inbox_live)
    assert await run(real_redis, scripts.INBOX_MARK, call) == [b"OK"]
    # A feed made anew lives its own while; the hash knows the last entry of the one lost.
    assert 0 < await real_redis.pttl(inbox.feed) <= 20_000
    [(newest, _)] = await real_redis.xrange(inbox.feed)
    assert await real_redis.hget(inbox.messages, "feed") == newest
    assert await real_redis.hget(inbox.messages, "lost") not in {None, newest}
    assert await real_redis.hget(shard.delivery(in_app.item.delivery_id), "status") == b"READ"
    assert await run(real_redis, scripts.INBOX_MARK, call) == [b"MOVED"]  # read already


def join_ask(nid: str, *, max_items: int = 3) -> JoinAsk:
    return JoinAsk(
        notification_id=notification_id(nid), recipient_id="u-1", notification_type="comment",
        key="A-17",
        producer="shop", locale="en", recipient=b'{"id":"u-1"}', item=b'{"text":"hi"}',
        closes_ms=10_000, max_items=max_items, again=False,
    )  # fmt: skip


def join_call(
    shard: ShardKeys, nid: str, digest: str, how: str, now_ms: int, max_items: int = 3
) -> Call:
    """One notification's ``join.lua`` call."""
    return digest_join_call(shard, [(join_ask(nid, max_items=max_items), digest, how, "")], now_ms)


def items_of(entries: list[bytes]) -> list[str]:
    """The names of the notifications in a digest's items list."""
    names = {notification_id(f"{letter}-{n}"): f"{letter}-{n}" for letter in "nm" for n in range(9)}
    return [names[entry.partition(b" ")[0].decode()] for entry in entries]


async def test_digests_join(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    opening = join_call(shard, "n-1", "d-1", NEW, 1_000)
    assert await run(real_redis, scripts.DIGEST_JOIN, opening) == [[b"JOINED", b"d-1", 1, 10_000]]
    member = f"d-1 {opening[0][1]}"  # the due set names a digest with its open key
    assert await real_redis.zscore(shard.digests_due, member) == 10_000
    assert await real_redis.get(opening[0][1]) == b"d-1 10000"  # the open digest, its closing
    # The same notification again (its request answered again): nothing is added.
    again = join_call(shard, "n-1", "d-1", AGAIN, 1_500)
    assert await run(real_redis, scripts.DIGEST_JOIN, again) == [[b"JOINED", b"d-1", 1, 10_000]]
    # Another candidate for the same (recipient, type, key): the open one is named.
    other = join_call(shard, "n-2", "d-2", NEW, 1_001)
    assert await run(real_redis, scripts.DIGEST_JOIN, other) == [[b"RETRY", b"d-1"]]
    second = join_call(shard, "n-2", "d-1", OPEN, 1_001)
    assert await run(real_redis, scripts.DIGEST_JOIN, second) == [[b"JOINED", b"d-1", 2, 10_000]]
    # The third fills it (max_items 3): due now and no longer open.
    third = join_call(shard, "n-3", "d-1", OPEN, 2_000)
    assert await run(real_redis, scripts.DIGEST_JOIN, third) == [[b"JOINED", b"d-1", 3, 2_000]]
    assert await real_redis.zscore(shard.digests_due, member) == 2_000
    entries = await real_redis.lrange(shard.digest_items("d-1"), 0, -1)
    assert entries[0] == f'{notification_id("n-1")} {{"text":"hi"}}'.encode()
    assert items_of(entries) == ["n-1", "n-2", "n-3"]
    fourth = join_call(shard, "n-4", "d-1", OPEN, 2_001)
    assert await run(real_redis, scripts.DIGEST_JOIN, fourth) == [[b"RETRY", b""]]
    # A notification that joined d-1, answered again, asked about another digest is sent
    # back to d-1; asked as new, it would not be (its request was never answered before).
    lost = join_call(shard, "n-2", "d-9", AGAIN, 3_000)
    assert await run(real_redis, scripts.DIGEST_JOIN, lost) == [[b"RETRY", b"d-1"]]
    # One call joins several, in order: the second joins the digest the first opened.
    joins = [(join_ask(nid), "d-5", NEW, "") for nid in ("m-1", "m-2", "m-3")]
    assert await run(real_redis, scripts.DIGEST_JOIN, digest_join_call(shard, joins, 4_000)) == [
        [b"JOINED", b"d-5", 1, 10_000], [b"JOINED", b"d-5", 2, 10_000],
        [b"JOINED", b"d-5", 3, 4_000],
    ]  # fmt: skip


async def test_digests_seal(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    opening = join_call(shard, "n-1", "d-1", NEW, 1_000)
    await run(real_redis, scripts.DIGEST_JOIN, opening)
    open_key = opening[0][1]
    member = f"d-1 {open_key}"
    # A digest whose id begins like the open one's is sealed without touching the open one.
    await real_redis.hset(shard.digest("d-"), "state", "open")
    prefix = digest_seal_call(shard, [f"d- {open_key}"])
    assert await run(real_redis, scripts.DIGEST_SEAL, prefix) == [
        [b"sealed", [b"state", b"sealed"], []]
    ]
    assert await real_redis.exists(open_key) == 1
    call = digest_seal_call(shard, [member, f"d-gone {open_key}"])
    [sealed, gone] = await run(real_redis, scripts.DIGEST_SEAL, call)
    assert sealed[0] == b"sealed"
    assert dict(zip(sealed[1][::2], sealed[1][1::2], strict=True))[b"state"] == b"sealed"
    assert sealed[2] == [f'{notification_id("n-1")} {{"text":"hi"}}'.encode()]
    assert gone == [b"GONE"]
    assert await real_redis.exists(open_key) == 0  # the next notification opens a new one
    [again] = await run(real_redis, scripts.DIGEST_SEAL, digest_seal_call(shard, [member]))
    assert again == sealed  # sealing again changes nothing
    await real_redis.hset(shard.digest("d-1"), "state", "closed")
    assert await run(real_redis, scripts.DIGEST_SEAL, digest_seal_call(shard, [member])) == [
        [b"closed"]
    ]
    assert await real_redis.zscore(shard.digests_due, member) is None  # closed: not due


async def test_digests_leave(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    for n, how in ((1, NEW), (2, OPEN), (3, OPEN)):
        call = join_call(shard, f"n-{n}", "d-1", how, 1_000, max_items=10)
        await run(real_redis, scripts.DIGEST_JOIN, call)
    assert await real_redis.hget(shard.digest("d-1"), "bytes") == b"39"
    leave = digest_leave_call(shard, "d-1", notification_id("n-2"))
    assert await run(real_redis, scripts.DIGEST_LEAVE, leave) == b"LEFT"
    assert items_of(await real_redis.lrange(shard.digest_items("d-1"), 0, -1)) == ["n-1", "n-3"]
    fields = await real_redis.hgetall(shard.digest("d-1"))
    assert b"count" not in fields  # the items list counts them
    assert fields[b"bytes"] == b"26"
    assert await run(real_redis, scripts.DIGEST_LEAVE, leave) == b"GONE"  # left already
    open_key = join_call(shard, "n-1", "d-1", OPEN, 1)[0][1]
    await run(real_redis, scripts.DIGEST_SEAL, digest_seal_call(shard, [f"d-1 {open_key}"]))
    too_late = digest_leave_call(shard, "d-1", notification_id("n-1"))
    assert await run(real_redis, scripts.DIGEST_LEAVE, too_late) == b"sealed"


async def test_digests_take(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    await real_redis.zadd(shard.digests_due, {"d-1": 1_000, "d-2": 2_000, "d-3": 9_000})
    call = digest_take_call(shard, 5_000, 10, 30_000)
    assert await run(real_redis, scripts.DIGEST_TAKE, call) == [b"d-1", b"d-2"]
    # Claimed: not taken again until the claim runs out, then due again by itself.
    assert await run(real_redis, scripts.DIGEST_TAKE, call) == []
    assert await real_redis.zscore(shard.digests_due, "d-1") == 35_000
    later = digest_take_call(shard, 35_000, 10, 30_000)
    assert await run(real_redis, scripts.DIGEST_TAKE, later) == [b"d-3", b"d-1", b"d-2"]


async def test_digests_close(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    opening = join_call(shard, "n-1", "d-1", NEW, 1_000)
    await run(real_redis, scripts.DIGEST_JOIN, opening)
    member = f"d-1 {opening[0][1]}"
    sealed = Sealed(
        digest_id="d-1", member=member, recipient_id="u-1", notification_type="comment",
        key="A-17", producer="shop", locale="en", recipient=b"{}", items=[b'{"text":"hi"}'],
    )  # fmt: skip
    call = digest_close_call(shard, [(sealed, "made-1")], 11_000)
    assert await run(real_redis, scripts.DIGEST_CLOSE, call) == [0]  # open: never sealed
    await run(real_redis, scripts.DIGEST_SEAL, digest_seal_call(shard, [member]))
    assert await run(real_redis, scripts.DIGEST_CLOSE, call) == [1]
    assert await run(real_redis, scripts.DIGEST_CLOSE, call) == [0]  # once
    fields = await real_redis.hgetall(shard.digest("d-1"))
    assert (fields[b"state"], fields[b"notification_id"]) == (b"closed", b"made-1")
    assert await real_redis.zscore(shard.digests_due, member) is None
    assert 0 < await real_redis.pttl(shard.digest_items("d-1")) <= 86_400_000
    assert await real_redis.xlen(shard.events) == 1  # its DigestClosed, once
    # One call closes a batch, each digest once.
    other = join_call(shard, "n-2", "d-2", NEW, 1_000)  # d-1 sealed: d-2 opens
    await run(real_redis, scripts.DIGEST_JOIN, other)
    second = dataclasses.replace(sealed, digest_id="d-2", member=f"d-2 {other[0][1]}")
    await run(real_redis, scripts.DIGEST_SEAL, digest_seal_call(shard, [second.member]))
    both = digest_close_call(shard, [(sealed, "made-1"), (second, "made-2")], 12_000)
    assert await run(real_redis, scripts.DIGEST_CLOSE, both) == [0, 1]
    assert await real_redis.xlen(shard.events) == 2


def test_every_script_has_a_contract_test() -> None:
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    assert {script.name.replace("/", "_") for script in scripts.ALL} <= tested


def test_every_script_names_the_module_that_lays_out_its_call() -> None:
    """The registry's comment beside each script names the module holding its ``_call``."""
    source = (REPO / "streams" / "core" / "scripts.py").read_text()
    named = re.findall(r'^([A-Z_]+) = LuaScript\("[a-z_/]+"\)  # ([a-z_.]+)$', source, re.M)
    assert len(named) == len(scripts.ALL)
    for constant, module in named:
        where = module if module.startswith("app.") else f"streams.{module}"
        assert hasattr(importlib.import_module(where), f"{constant.lower()}_call"), constant


def test_every_lua_file_is_registered() -> None:
    """A script file that no LuaScript loads is dead or loaded elsewhere: neither is allowed."""
    streams = REPO / "streams"
    files = {
        entry.relative_to(streams).with_suffix("").as_posix() for entry in streams.rglob("*.lua")
    }
    assert files - {"core/shared"} == {script.name for script in scripts.ALL}


async def test_campaigns_write(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    created = CampaignChange(
        sets={"producer": "orders", "state": "draft", "spec": b"{}"},
        chunks=[encode_chunk(["a", "b"])],
        upload="part-1",
        added=2,
        due_ms=5,
        created_ms=1,
        events=[CampaignStateChanged(at=datetime.now(UTC), campaign_id="c", state="draft",
                                     previous="draft")],
    )  # fmt: skip
    call = campaign_write_call(shard, "c", "orders", 0, created)
    assert await run(real_redis, scripts.CAMPAIGN_WRITE, call) == [b"OK", 1]
    assert await run(real_redis, scripts.CAMPAIGN_WRITE, call) == [b"MOVED", 1]
    again = campaign_write_call(shard, "c", "orders", 1, created)
    assert await run(real_redis, scripts.CAMPAIGN_WRITE, again) == [b"UPLOADED", 2]
    adopt = CampaignChange(increments={"accepted": 2}, emptied=0, adopt_selection=True)
    await real_redis.rpush(shard.campaign("c").audience_draft, b'["x"]')
    call = campaign_write_call(shard, "c", "orders", 1, adopt)
    assert await run(real_redis, scripts.CAMPAIGN_WRITE, call) == [b"OK", 2]
    assert await real_redis.lrange(shard.campaign("c").audience, 0, -1) == [b""]
    assert await real_redis.hget(shard.campaign("c").record, "accepted") == b"2"
    assert await real_redis.zscore(shard.campaigns_due, "c") == 5
    assert await real_redis.xlen(shard.events) == 1


async def test_recipients_read(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await RecipientSettingsStore(real_redis, keys).set_preferences(
        "user-1", [PreferenceEntry(type="marketing", channel="EMAIL", enabled=False)]
    )
    call = recipients_read_call(shard, ["user-1", "user-2"])
    first, second = await run(real_redis, scripts.RECIPIENTS_READ, call)
    assert RecipientSettings.from_hash(first).disabled == {("marketing", "EMAIL")}
    assert second == []


async def test_delivery_fair_feed(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    for producer, count in (("a", 50), ("b", 3)):
        await real_redis.rpush(
            shard.queued(Priority.LOW, producer), *[f"{producer}{n}" for n in range(count)]
        )
        await real_redis.sadd(shard.queued_producers(Priority.LOW), producer)
    fairness = Fairness(buffer=20, quantum=2, weights={"a": 3})
    call = fair_feed_call(shard, Priority.LOW, ["a", "b"], fairness)
    assert await run(real_redis, scripts.FAIR_FEED, call) == 20
    moved = [fields[b"w"] for _, fields in await real_redis.xrange(shard.work(Priority.LOW))]
    # Rounds of 6 of a's and 2 of b's, until b's 3 are through and the buffer is full.
    assert moved == [
        b"a0", b"a1", b"a2", b"a3", b"a4", b"a5", b"b0", b"b1",
        b"a6", b"a7", b"a8", b"a9", b"a10", b"a11", b"b2",
        b"a12", b"a13", b"a14", b"a15", b"a16",
    ]  # fmt: skip
    assert await real_redis.smembers(shard.queued_producers(Priority.LOW)) == {b"a"}
    assert await run(real_redis, scripts.FAIR_FEED, call) == 0  # no room left
