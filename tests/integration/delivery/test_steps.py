"""Escalation steps on real Redis with a running worker and the sandbox: unread, each step
goes at its time; read in the inbox, the steps that wait on a read come due at once and end
SKIPPED without reaching the sandbox; a step whose earlier delivery was confirmed delivered
is skipped when it comes due, and one taken over from a worker is skipped only when the
read came before it was queued; a step coming due follows the recipient's preferences as they
are then; the states later steps look at are kept after they end."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from app.catalog import Catalog, parse_catalog
from app.delivery import steps
from app.inbox.read_steps import StepsOnRead
from streams.core import clock
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel
from streams.delivery.leases import Lease, LeasedDelivery, LeaseVerdict, Worker
from streams.delivery.work_items import WorkItem
from streams.inbox.messages import MessageState
from streams.inbox.store import InboxStore
from streams.recipients.settings import RecipientSettingsStore
from tests.integration.delivery_support import (
    accept,
    catalog_text,
    running_worker,
    sandbox_calls,
    state,
    wait_until,
)

STEPS = """
[types.comment]
channels = ["IN_APP", "PUSH", "EMAIL"]
priority = "NORMAL"
ttl_seconds = 3600
opt_out = true
steps = [
  { channel = "IN_APP" },
  { channel = "PUSH", after = "PUSH_AFTER", unless = "read" },
  { channel = "EMAIL", after = "EMAIL_AFTER", unless = ["read", "delivered"] },
]

[types.comment.templates.en]
IN_APP = { title = "New comment", body = "{{ text }}" }
PUSH = { title = "New comment", body = "{{ text }}" }
EMAIL = { title = "New comment", body = "{{ text }}" }
"""


def catalog(push_after: str = "1s", email_after: str = "2s") -> Catalog:
    steps = STEPS.replace("PUSH_AFTER", push_after).replace("EMAIL_AFTER", email_after)
    return parse_catalog(catalog_text() + steps, "steps.toml")


def comment(recipient: str) -> dict[str, Any]:
    return {
        "recipient": {"id": recipient, "email": "a@example.com", "push_tokens": ["tok-1"]},
        "type": "comment",
        "data": {"text": "Nice!"},
    }


async def status_is(redis: Redis, keys: KeySpace, delivery_id: str, status: str) -> bool:
    return (await state(redis, keys, delivery_id)).get("status") == status


async def test_unread_each_step_goes_at_its_time(real_redis: Redis, key_prefix: str) -> None:
    keys, steps_catalog = KeySpace(key_prefix), catalog()
    answer = await accept(real_redis, keys, steps_catalog, comment("u-1"), "k-1")
    ids = {d["channel"]: d["id"] for d in answer["deliveries"]}
    async with running_worker(real_redis, keys, steps_catalog):
        await wait_until(lambda: status_is(real_redis, keys, ids["EMAIL"], "SENT"), within=8)
    sent = {c["delivery_id"]: c["at_ms"] for c in await sandbox_calls(real_redis, keys)}
    due = {d["channel"]: d.get("due_ms") for d in answer["deliveries"]}
    assert 0 <= sent[ids["PUSH"]] - due["PUSH"] < 1000
    assert 0 <= sent[ids["EMAIL"]] - due["EMAIL"] < 1000
    in_app = await state(real_redis, keys, ids["IN_APP"])
    assert (in_app["status"], in_app["held"]) == ("SENT", "1")  # kept for the later steps


async def test_a_read_skips_the_waiting_steps_at_once(real_redis: Redis, key_prefix: str) -> None:
    # Steps far off: skipped within seconds of the read, they were not skipped at their time.
    keys, steps_catalog = KeySpace(key_prefix), catalog("30s", "60s")
    inbox = InboxStore(
        real_redis, keys, on_read=StepsOnRead(real_redis, steps_catalog, clock.now_ms)
    )
    answer = await accept(real_redis, keys, steps_catalog, comment("u-2"), "k-2")
    ids = {d["channel"]: d["id"] for d in answer["deliveries"]}
    async with running_worker(real_redis, keys, steps_catalog):
        await wait_until(lambda: status_is(real_redis, keys, ids["IN_APP"], "SENT"))
        assert await inbox.mark("u-2", ids["IN_APP"], "read", clock.now_ms()) is not None
        await wait_until(lambda: status_is(real_redis, keys, ids["EMAIL"], "SKIPPED"), within=5)
        await wait_until(lambda: status_is(real_redis, keys, ids["PUSH"], "SKIPPED"), within=5)
    for channel in ("PUSH", "EMAIL"):
        skipped = await state(real_redis, keys, ids[channel])
        assert skipped["reason"] == "read"
    called = {c["delivery_id"] for c in await sandbox_calls(real_redis, keys)}
    assert not called & {ids["PUSH"], ids["EMAIL"]}
    assert await real_redis.zcard(keys.shard(0).delayed) == 0


async def test_a_step_coming_due_follows_the_recipients_preferences_as_they_are_then(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, steps_catalog = KeySpace(key_prefix), catalog("2s", "3s")
    answer = await accept(real_redis, keys, steps_catalog, comment("u-3"), "k-3")
    ids = {d["channel"]: d["id"] for d in answer["deliveries"]}
    # After the notification was accepted, before its PUSH step is due: pushes switched off.
    await RecipientSettingsStore(real_redis, keys).switch_off("u-3", "comment", Channel.PUSH, "api")
    async with running_worker(real_redis, keys, steps_catalog):
        await wait_until(lambda: status_is(real_redis, keys, ids["EMAIL"], "SENT"), within=10)
    push = await state(real_redis, keys, ids["PUSH"])
    assert (push["status"], push["reason"]) == ("SUPPRESSED", "opted_out")
    called = {c["delivery_id"] for c in await sandbox_calls(real_redis, keys)}
    assert ids["PUSH"] not in called
    assert ids["EMAIL"] in called


async def test_a_step_is_skipped_when_an_earlier_delivery_was_delivered(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await real_redis.hset(shard.delivery("push-1"), mapping={"status": "DELIVERED"})
    await real_redis.hset(shard.delivery("in-app-1"), mapping={"status": "SENT"})
    email = step_lease(keys, ["read", "delivered"], ["in-app-1", "push-1"])
    push = step_lease(keys, ["read"], ["in-app-1"], delivery_id="p")
    plain = step_lease(keys, [], [], delivery_id="x")
    decided = await steps.skipped(real_redis, [email, push, plain])
    assert decided == {"e": steps.Skipped("delivered", because_of="push-1")}
    await real_redis.hset(shard.delivery("in-app-1"), "status", "READ")
    decided = await steps.skipped(real_redis, [email, push])
    assert decided == {
        "e": steps.Skipped("read", because_of="in-app-1"),
        "p": steps.Skipped("read", because_of="in-app-1"),
    }
    # Taken over from a worker that never recorded an outcome: read after the step was
    # queued, that worker may have sent it, so it is not recorded SKIPPED (it goes again, at
    # least once, as any delivery taken over)...
    await real_redis.hset(shard.delivery("p"), mapping={"status": "SENDING", "leases": 2})
    messages = shard.inbox("r").messages
    await real_redis.hset(messages, "f:in-app-1", MessageState(read_ms=5_000, version=4).text())
    queued_at_4000 = step_lease(keys, ["read"], ["in-app-1"], delivery_id="p", entry_id="4000-0")
    assert await steps.skipped(real_redis, [queued_at_4000]) == {}
    # ... but read before it was queued, every worker that held it could only skip it.
    queued_at_6000 = step_lease(keys, ["read"], ["in-app-1"], delivery_id="p", entry_id="6000-0")
    assert await steps.skipped(real_redis, [queued_at_6000]) == {
        "p": steps.Skipped("read", because_of="in-app-1")
    }


def step_lease(
    keys: KeySpace,
    unless: list[str],
    watch: list[str],
    delivery_id: str = "e",
    entry_id: str = "1-0",
) -> LeasedDelivery:
    item = WorkItem(
        delivery_id=delivery_id, notification_id="n", notification_type="comment",
        channel="EMAIL", priority="NORMAL", recipient_id="r", address="a@example.com",
        locale="en", created_ms=1, expires_ms=10**13, unless=unless, watch=watch, step=3,
    )  # fmt: skip
    lease = Lease(LeaseVerdict.GO, version=1, attempts=0, now_ms=1, first_attempt_ms=0)
    return LeasedDelivery.taken(keys.shard(0), item, entry_id, lease, Worker("w", "1"))
