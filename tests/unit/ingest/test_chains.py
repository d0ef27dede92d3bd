"""Escalation steps and fallbacks at ingest: a later step waits in ``delayed`` with its
conditions and the deliveries they look at, the deliveries looked at are marked so their
states are kept, a delivery with a fallback carries its id, channel and address, and a
fallback whose channel has no usable address is planned at once."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.catalog import parse_catalog
from app.ingest.fanout import FanoutError, Planner
from app.ingest.requests import NotificationRequest, Recipient
from streams.core import codec
from streams.core.events import DeliveryQueued, DeliveryScheduled, DeliverySuppressed
from streams.core.keys import ShardKeys
from streams.core.records import decode_record
from streams.delivery.delayed import work_item_of_member
from streams.delivery.work_items import WorkItem
from streams.ingest.writer import IngestItem
from streams.recipients.read import RecipientSettings
from tests.conftest import DIGEST

REPO = Path(__file__).resolve().parents[3]
SHARD = ShardKeys("t", 0)
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
COMMENT = """
[types.comment]
channels = ["IN_APP", "PUSH", "EMAIL"]
priority = "NORMAL"
ttl_seconds = 7200
opt_out = true
steps = [
  { channel = "IN_APP" },
  { channel = "PUSH", after = "15m", unless = "read" },
  { channel = "EMAIL", after = "1h", unless = ["read", "delivered"] },
]
fallback = { PUSH = "SMS" }

[types.comment.templates.en]
IN_APP = { title = "New comment", body = "{{ text }}" }
PUSH = { title = "New comment", body = "{{ text }}" }
EMAIL = { title = "New comment", body = "{{ text }}" }
SMS = { body = "New comment: {{ text }} ({{ thread }})" }
"""


@pytest.fixture(scope="module")
def planner() -> Planner:
    catalog = parse_catalog((REPO / "clarion.toml").read_text() + COMMENT, "test.toml")
    return Planner(catalog, DIGEST)


def comment(**recipient: Any) -> NotificationRequest:
    given = {"email": "a@example.com", "phone": "+4915112345678", "push_tokens": ["tok-1"]}
    return NotificationRequest(
        recipient=Recipient(id="user-42", **(given | recipient)),
        type="comment",
        data={"text": "Nice!", "thread": "A-17"},
    )


def plan(planner: Planner, req: NotificationRequest, **options: Any) -> IngestItem:
    return planner.plan(
        shard=SHARD, producer="app", idempotency_key="k", request=req,
        identity=planner.identity(SHARD, req), settings=RecipientSettings(), now=NOW,
        **options,
    )  # fmt: skip


def items(planned: IngestItem) -> dict[str, tuple[WorkItem, int | None]]:
    """Each work item by channel, with when it is due (None: at once)."""
    found = {}
    for work in planned.work:
        raw = work_item_of_member(work.item) if work.due_ms else work.item
        item = codec.decode_work_item(raw)
        found[item.channel] = (item, work.due_ms)
    return found


def test_later_steps_wait_with_their_conditions_and_the_deliveries_they_look_at(
    planner: Planner,
) -> None:
    planned = plan(planner, comment())
    record = decode_record(planned.record)
    ids = {d.channel: d.id for d in record.deliveries}
    fates = [(d.channel, d.status, d.reason, d.due_ms) for d in record.deliveries]
    assert fates == [
        ("IN_APP", "QUEUED", "", 0),
        ("PUSH", "SCHEDULED", "step", NOW_MS + 15 * 60_000),
        ("EMAIL", "SCHEDULED", "step", NOW_MS + 3_600_000),
    ]
    work = items(planned)
    in_app, at_once = work["IN_APP"]
    assert at_once is None
    assert (in_app.step, in_app.unless, in_app.watch, in_app.watched) == (1, [], [], True)
    push, push_due = work["PUSH"]
    assert push_due == push.send_at_ms == NOW_MS + 15 * 60_000
    assert (push.step, push.unless, push.watch, push.watched) == (
        2,
        ["read"],
        [ids["IN_APP"]],
        True,
    )
    email, _ = work["EMAIL"]
    assert (email.step, email.unless) == (3, ["read", "delivered"])
    assert email.watch == [ids["IN_APP"], ids["PUSH"]]
    assert not email.watched  # no step after it looks at it
    events = codec.decode_events(planned.events)
    scheduled = [e for e in events if isinstance(e, DeliveryScheduled)]
    assert [(e.step, e.unless) for e in scheduled] == [(2, ["read"]), (3, ["read", "delivered"])]
    [queued] = [e for e in events if isinstance(e, DeliveryQueued)]
    assert queued.step == 1


def test_a_step_counts_from_the_send_time_of_a_notification_sent_later(
    planner: Planner,
) -> None:
    given = comment()
    later = NotificationRequest(
        recipient=given.recipient, type=given.type, data=given.data, delay=600
    )
    record = decode_record(plan(planner, later).record)
    due = {d.channel: d.due_ms for d in record.deliveries}
    assert due == {
        "IN_APP": NOW_MS + 600_000,
        "PUSH": NOW_MS + 600_000 + 15 * 60_000,
        "EMAIL": NOW_MS + 600_000 + 3_600_000,
    }


def test_the_first_push_carries_the_fallback_made_once_per_notification(planner: Planner) -> None:
    req = comment(push_tokens=["tok-1", "tok-2"])
    identity = planner.identity(SHARD, req)
    [fallback] = identity.fallbacks
    assert (fallback.source, fallback.channel, fallback.address) == (
        "PUSH",
        "SMS",
        "+4915112345678",
    )
    assert fallback.delivery_id not in identity.delivery_ids
    planned = planner.plan(
        shard=SHARD, producer="app", idempotency_key="k", request=req, identity=identity,
        settings=RecipientSettings(), now=NOW,
    )  # fmt: skip
    pushes = [
        codec.decode_work_item(work_item_of_member(w.item))
        for w in planned.work
        if b'"PUSH"' in w.item
    ]
    assert len(pushes) == 2
    # The first device's push carries it: two carriers could each make it, and send it twice.
    assert [tuple(p.fallback) for p in pushes] == [
        (fallback.delivery_id, "SMS", "+4915112345678"), (),
    ]  # fmt: skip
    assert "SMS" not in [d.channel for d in decode_record(planned.record).deliveries]


def test_without_a_push_token_the_fallback_is_planned_at_once(planner: Planner) -> None:
    planned = plan(planner, comment(push_tokens=[]))
    record = decode_record(planned.record)
    fates = [(d.channel, d.status, d.reason) for d in record.deliveries]
    assert fates == [
        ("IN_APP", "QUEUED", ""),
        ("PUSH", "SUPPRESSED", "no_address"),
        ("EMAIL", "SCHEDULED", "step"),
        ("SMS", "QUEUED", ""),
    ]
    events = codec.decode_events(planned.events)
    [suppressed] = [e for e in events if isinstance(e, DeliverySuppressed)]
    [sms] = [e for e in events if isinstance(e, DeliveryQueued) and e.channel == "SMS"]
    assert sms.fallback_of == suppressed.delivery_id
    sms_item, _ = items(planned)["SMS"]
    assert sms_item.address == "+4915112345678"
    assert sms_item.fallback == []


def test_a_push_opted_out_makes_no_fallback(planner: Planner) -> None:
    settings = RecipientSettings(disabled=frozenset({("comment", "PUSH")}))
    planned = planner.plan(
        shard=SHARD, producer="app", idempotency_key="k", request=comment(),
        identity=planner.identity(SHARD, comment()), settings=settings, now=NOW,
    )  # fmt: skip
    channels = [d.channel for d in decode_record(planned.record).deliveries]
    assert "SMS" not in channels


def test_the_fallbacks_template_fields_are_required_at_ingest(planner: Planner) -> None:
    req = NotificationRequest(
        recipient=Recipient(id="u", push_tokens=["t"]), type="comment", data={"text": "x"}
    )
    with pytest.raises(FanoutError, match=r"data.thread: required by the comment SMS template"):
        planner.channels(req)


def test_a_type_without_steps_plans_items_as_before(planner: Planner) -> None:
    req = NotificationRequest(
        recipient=Recipient(id="u", email="a@example.com"),
        type="order_confirmed", channels=["EMAIL"], data={"order_id": "1"},
    )  # fmt: skip
    planned = plan(planner, req)
    [work] = planned.work
    assert b"[]" not in work.item  # no step fields written
    assert not work.due_ms
