"""Fan-out: from one request to one planned delivery per channel and address."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest

from app import tracing
from app.catalog import load_catalog, parse_catalog
from app.ingest.fanout import FanoutError, Planner
from app.ingest.fingerprints import fingerprint
from app.ingest.requests import NotificationRequest, Recipient
from streams.campaigns.ids import notification_key
from streams.core import codec
from streams.core.events import (
    DeliveryDeferred,
    DeliveryEvent,
    DeliveryExpired,
    DeliveryQueued,
    DeliverySuppressed,
    NotificationAccepted,
    QuietHoursSetting,
)
from streams.core.keys import ShardKeys, shard_from_id
from streams.core.records import DeliveryAtAcceptance, NotificationRecord, decode_record
from streams.core.vocabulary import Priority
from streams.delivery.delayed import work_item_of_member
from streams.delivery.work_items import WorkItem
from streams.ingest.writer import IngestItem, PlannedWork
from streams.recipients.read import RecipientSettings
from tests.conftest import DIGEST, REQUEST
from tests.unit.tracing_support import tracing_on

REPO = Path(__file__).resolve().parents[3]
__all__ = ["tracing_on"]  # the fixture, used by name
BERLIN = ZoneInfo("Europe/Berlin")
SHARD = ShardKeys("t", 0)
NOON = datetime(2026, 6, 1, 12, 0, tzinfo=BERLIN)
LATE = datetime(2026, 6, 1, 23, 0, tzinfo=BERLIN)  # inside 22:00-08:00
QUIET = RecipientSettings(
    version=4,
    quiet_hours=QuietHoursSetting(start="22:00", end="08:00", timezone="Europe/Berlin"),
)
# 08:00 CEST the next morning.
QUIET_END = datetime(2026, 6, 2, 6, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def planner() -> Planner:
    return Planner(load_catalog(REPO / "clarion.toml"), DIGEST)


def request(
    type_: str,
    data: dict[str, Any],
    *,
    email: str | None = None,
    phone: str | None = None,
    push_tokens: tuple[str, ...] = (),
    **options: Any,
) -> NotificationRequest:
    recipient = Recipient(id="user-42", email=email, phone=phone, push_tokens=list(push_tokens))
    return NotificationRequest(recipient=recipient, type=type_, data=data, **options)


def order(**recipient: Any) -> NotificationRequest:
    return request("order_confirmed", {"order_id": "1001"}, **recipient)


def plan(
    planner: Planner,
    req: NotificationRequest,
    settings: RecipientSettings | None = None,
    now: datetime = NOON,
    key: str = "order-1001",
) -> IngestItem:
    return planner.plan(
        shard=SHARD,
        producer="orders",
        idempotency_key=key,
        request=req,
        identity=planner.identity(SHARD, req),
        settings=settings or RecipientSettings(),
        now=now,
    )


def record(item: IngestItem) -> NotificationRecord:
    return decode_record(item.record)


def fates(item: IngestItem) -> list[tuple[str, str, str]]:
    """(channel, status, reason) of each delivery, in fan-out order."""
    return [(d.channel, d.status, d.reason) for d in record(item).deliveries]


Planned = tuple[DeliveryAtAcceptance, PlannedWork | None, WorkItem | None]


def deliveries(item: IngestItem) -> list[Planned]:
    """Each delivery of the record in fan-out order, with its work item if it has one.

    Work items are matched to deliveries by their ``delivery_id``; every work item must
    belong to exactly one delivery of the record.
    """
    by_id: dict[str, tuple[PlannedWork, WorkItem]] = {}
    for planned in item.work:
        # A delayed member carries the stream it returns to in front of the work item.
        delayed = planned.due_ms is not None
        raw = work_item_of_member(planned.item) if delayed else planned.item
        if delayed:
            assert planned.item.startswith(b"normal ") or planned.item.startswith(b"low ")
        work = codec.decode_work_item(raw)
        assert work.delivery_id not in by_id, f"two work items for {work.delivery_id}"
        by_id[work.delivery_id] = (planned, work)
    result: list[Planned] = []
    for delivery in record(item).deliveries:
        planned_work, work_item = by_id.pop(delivery.id, (None, None))
        result.append((delivery, planned_work, work_item))
    assert not by_id, f"work items for unknown deliveries: {sorted(by_id)}"
    return result


def targets(item: IngestItem) -> list[tuple[str | None, int]]:
    """(where, due_ms) of each delivery in fan-out order: its work stream's name, or
    "delayed" with its due time; (None, 0) without a work item."""
    return [
        (None, 0)
        if planned is None
        else (planned.priority.stream_name, 0)
        if planned.due_ms is None
        else ("delayed", planned.due_ms)
        for _, planned, _ in deliveries(item)
    ]


def test_an_unknown_type_names_the_type_field(planner: Planner) -> None:
    with pytest.raises(FanoutError, match=r"^type: .*'invoice'"):
        planner.channels(request("invoice", {}))


def test_a_channel_without_a_template_names_the_channels_field(planner: Planner) -> None:
    with pytest.raises(FanoutError, match=r"^channels: .*PUSH"):
        planner.channels(request("otp", {"code": "123456"}, channels=["PUSH"]))


def test_a_channel_listed_twice_names_the_channels_field(planner: Planner) -> None:
    with pytest.raises(FanoutError, match=r"^channels: "):
        planner.channels(request("otp", {"code": "1"}, channels=["SMS", "SMS"]))


def test_missing_template_data_names_the_data_field(planner: Planner) -> None:
    with pytest.raises(FanoutError, match=r"^data\.code: "):
        planner.channels(request("otp", {"token": "123456"}))


def test_template_data_is_checked_against_the_template_actually_used(planner: Planner) -> None:
    # marketing needs subject and body; the first missing name is reported.
    with pytest.raises(FanoutError, match=r"^data\.body: "):
        planner.channels(request("marketing", {}))
    with pytest.raises(FanoutError, match=r"^data\.subject: "):
        planner.channels(request("marketing", {"body": "b"}))


def test_default_and_requested_channels(planner: Planner) -> None:
    assert planner.channels(order()) == ["EMAIL", "PUSH", "IN_APP"]
    assert planner.channels(request("otp", {"code": "1"}, channels=["EMAIL"])) == ["EMAIL"]
    # German OTP by SMS uses the de template; the locale's language is enough.
    assert planner.channels(request("otp", {"code": "1"}, locale="de-AT")) == ["SMS"]


def test_identity_fixes_one_id_per_delivery_on_the_shard(planner: Planner) -> None:
    identity = planner.identity(ShardKeys("t", 7), order(email="jane@example.com"))
    assert identity.pairs == (("EMAIL", "jane@example.com"), ("PUSH", ""), ("IN_APP", "user-42"))
    ids = [identity.notification_id, *identity.delivery_ids]
    assert len(set(ids)) == 4
    assert {shard_from_id(value) for value in ids} == {7}


def test_a_recipient_without_a_push_token_gets_no_push(planner: Planner) -> None:
    item = plan(planner, order(email="jane@example.com"))
    assert fates(item) == [
        ("EMAIL", "QUEUED", ""),
        ("PUSH", "SUPPRESSED", "no_address"),
        ("IN_APP", "QUEUED", ""),
    ]
    assert targets(item) == [("normal", 0), (None, 0), ("normal", 0)]
    email, push, in_app = deliveries(item)
    # The suppressed push has no work item.
    assert push[1] is None
    assert push[2] is None
    assert len(item.work) == 2
    work = email[2]
    assert work is not None
    assert (work.address, work.channel, work.data) == (
        "jane@example.com",
        "EMAIL",
        {"order_id": "1001"},
    )
    assert in_app[2] is not None
    assert (in_app[2].address, in_app[2].channel) == ("user-42", "IN_APP")


def test_each_push_token_gets_its_own_delivery(planner: Planner) -> None:
    item = plan(planner, order(email="jane@example.com", push_tokens=("tok-a", "tok-b", "tok-a")))
    pushes = [(d, w) for d, _, w in deliveries(item) if d.channel == "PUSH"]
    assert len(pushes) == 2
    assert all(d.status == "QUEUED" for d, _ in pushes)
    addresses = [w.address if w is not None else None for _, w in pushes]
    assert addresses == ["tok-a", "tok-b"]
    assert len({d.id for d in record(item).deliveries}) == 4


def test_a_switched_off_type_and_channel_is_suppressed(planner: Planner) -> None:
    settings = RecipientSettings(version=2, disabled=frozenset({("marketing", "EMAIL")}))
    req = request(
        "marketing", {"subject": "Sale", "body": "-20 %"}, email="j@example.com", push_tokens=("t",)
    )
    item = plan(planner, req, settings)
    assert fates(item) == [("EMAIL", "SUPPRESSED", "opted_out"), ("PUSH", "QUEUED", "")]
    assert targets(item) == [(None, 0), ("low", 0)]
    assert item.settings_version == 2


def test_a_type_that_cannot_be_switched_off_is_sent_anyway(planner: Planner) -> None:
    settings = RecipientSettings(disabled=frozenset({("otp", "SMS")}))
    item = plan(planner, request("otp", {"code": "1"}, phone="+4915112345678"), settings)
    assert fates(item) == [("SMS", "QUEUED", "")]
    assert targets(item) == [("high", 0)]
    assert item.priority == Priority.HIGH  # written in pipelines of its own, not behind big batches


def test_quiet_hours_defer_a_normal_email_until_the_window_ends(planner: Planner) -> None:
    item = plan(planner, order(email="jane@example.com", push_tokens=("tok",)), QUIET, LATE)
    assert fates(item) == [
        ("EMAIL", "SCHEDULED", ""),
        ("PUSH", "SCHEDULED", ""),
        ("IN_APP", "QUEUED", ""),
    ]
    due_ms = int(QUIET_END.timestamp() * 1000)
    # IN_APP lands silently in an inbox: not deferred.
    assert targets(item) == [("delayed", due_ms), ("delayed", due_ms), ("normal", 0)]
    email, push, _ = deliveries(item)
    # A deferred delivery still has its work item, waiting in the delayed set.
    assert email[2] is not None
    assert email[2].address == "jane@example.com"
    assert push[2] is not None
    assert push[2].address == "tok"
    deferred = codec.decode_events(item.events)[1]
    assert isinstance(deferred, DeliveryDeferred)
    assert (deferred.reason, deferred.until) == ("quiet_hours", QUIET_END)
    assert deferred.delivery_id == email[0].id
    assert int(deferred.until.timestamp() * 1000) == due_ms


def test_quiet_hours_do_not_hold_back_high_priority(planner: Planner) -> None:
    item = plan(planner, request("otp", {"code": "1"}, phone="+4915112345678"), QUIET, LATE)
    assert fates(item) == [("SMS", "QUEUED", "")]
    assert targets(item) == [("high", 0)]


def test_a_requested_high_priority_is_not_held_back_either(planner: Planner) -> None:
    req = order(email="jane@example.com", priority="HIGH")
    item = plan(planner, req, QUIET, LATE)
    assert fates(item)[0] == ("EMAIL", "QUEUED", "")
    assert targets(item)[0] == ("high", 0)


def test_outside_quiet_hours_nothing_is_deferred(planner: Planner) -> None:
    item = plan(planner, order(email="jane@example.com"), QUIET, NOON)
    assert fates(item)[0] == ("EMAIL", "QUEUED", "")
    assert targets(item)[0] == ("normal", 0)
    assert item.priority != Priority.HIGH


def test_a_short_lived_notification_expires_rather_than_waiting_out_quiet_hours(
    planner: Planner,
) -> None:
    req = request(
        "marketing",
        {"subject": "Sale", "body": "-20 %"},
        email="jane@example.com",
        push_tokens=("tok",),
        ttl_seconds=3600,
    )
    item = plan(planner, req, QUIET, LATE)  # quiet hours end in 9 h, the TTL is 1 h
    assert fates(item) == [
        ("EMAIL", "EXPIRED", "quiet_hours_past_ttl"),
        ("PUSH", "EXPIRED", "quiet_hours_past_ttl"),
    ]
    # Neither has a work item: nothing is queued nor waits in the delayed set.
    assert item.work == []
    assert targets(item) == [(None, 0), (None, 0)]
    assert all(isinstance(e, DeliveryExpired) for e in codec.decode_events(item.events)[1:])


def test_the_events_record_the_acceptance_and_each_fate(planner: Planner) -> None:
    req = order(email="jane@example.com")
    item = plan(planner, req, QUIET, LATE)
    events = codec.decode_events(item.events)
    accepted, *per_delivery = events
    assert isinstance(accepted, NotificationAccepted)
    assert accepted.notification_id == item.notification_id
    assert accepted.producer == "orders"
    assert accepted.idempotency_key == "order-1001"
    assert accepted.notification_type == "order_confirmed"
    assert accepted.priority == "NORMAL"
    assert accepted.locale == "en"
    assert accepted.expires_at == LATE + timedelta(seconds=172800)
    delivered = record(item).deliveries
    assert accepted.delivery_ids == [d.id for d in delivered]
    assert [type(event) for event in per_delivery] == [
        DeliveryDeferred,
        DeliverySuppressed,
        DeliveryQueued,
    ]
    for event, delivery in zip(per_delivery, delivered, strict=True):
        assert isinstance(event, DeliveryEvent)
        assert event.delivery_id == delivery.id
        assert event.notification_id == item.notification_id
        # Each delivery starts at version 1.
        assert event.version == 1
    assert isinstance(per_delivery[1], DeliverySuppressed)
    assert per_delivery[1].reason == "no_address"


def test_events_carry_no_contact_address(planner: Planner) -> None:
    req = order(email="jane@example.com", push_tokens=("secret-push-token",))
    item = plan(planner, req)
    assert b"jane@example.com" not in item.events
    assert b"secret-push-token" not in item.events
    assert any(b"secret-push-token" in work.item for work in item.work)  # it is delivered


def test_the_response_lists_every_delivery_with_its_status(planner: Planner) -> None:
    item = plan(planner, order(email="jane@example.com"), QUIET, LATE)
    response = json.loads(item.response)
    assert response["id"] == item.notification_id
    # A delivery that ends at once says why; the others carry no reason; one held for quiet
    # hours says until when.
    assert response["deliveries"] == [
        {
            "id": d.id,
            "channel": d.channel,
            "status": d.status,
            **({"reason": d.reason} if d.reason else {}),
            **({"due_ms": d.due_ms} if d.due_ms else {}),
        }
        for d in record(item).deliveries
    ]
    assert response["deliveries"][0]["due_ms"] > 0
    assert response["deliveries"][1]["reason"] == "no_address"
    assert [entry["status"] for entry in response["deliveries"]] == [
        "SCHEDULED",
        "SUPPRESSED",
        "QUEUED",
    ]


def test_ttl_and_times_are_recorded_in_milliseconds(planner: Planner) -> None:
    item = plan(planner, request("otp", {"code": "1"}, phone="+4915112345678"), now=NOON)
    now_ms = int(NOON.timestamp() * 1000)
    ((_, _, work),) = deliveries(item)
    assert work is not None
    assert work.created_ms == now_ms
    assert work.expires_ms == now_ms + 300_000
    stored = record(item)
    assert stored.created_ms == now_ms
    assert stored.expires_ms == now_ms + 300_000
    assert (stored.id, stored.type) == (item.notification_id, "otp")


def test_times_follow_each_acceptance_time_and_ttl(planner: Planner) -> None:
    # A batch's notifications share the values derived from its acceptance time; a new
    # time, or another TTL, must not reuse them.
    otp = request("otp", {"code": "1"}, phone="+4915112345678")
    short = request("otp", {"code": "1"}, phone="+4915112345678", ttl_seconds=60)
    for now, req, ttl_ms in [(NOON, otp, 300_000), (LATE, otp, 300_000), (LATE, short, 60_000),
                             (NOON, short, 60_000), (NOON, otp, 300_000)]:  # fmt: skip
        stored = record(plan(planner, req, now=now))
        now_ms = int(now.timestamp() * 1000)
        assert (stored.created_ms, stored.expires_ms) == (now_ms, now_ms + ttl_ms)


def test_the_plan_carries_the_request_fingerprint(planner: Planner) -> None:
    req = order(email="jane@example.com")
    assert plan(planner, req).fingerprint == fingerprint(req)


APNS_TOKEN = "a1" * 32
PUSH_ONLY_FCM = """\
[providers.fcm]
kind = "fcm"
project_id = "clarion-test"
service_account_env = "FCM_ACCOUNT"

[channels.PUSH]
platforms = { fcm = ["fcm"] }

[types.news]
channels = ["PUSH"]
priority = "LOW"
ttl_seconds = 3600
opt_out = true

[types.news.templates.en]
PUSH = { title = "News", body = "Hello" }
"""


def push_targets_request(*targets: Any, tokens: tuple[str, ...] = ()) -> NotificationRequest:
    recipient = {"id": "u", "push_targets": list(targets), "push_tokens": list(tokens)}
    return msgspec.convert({"recipient": recipient, "type": "news"}, NotificationRequest)


def test_each_push_target_gets_a_delivery_to_its_platform_address() -> None:
    planner = Planner(parse_catalog(PUSH_ONLY_FCM), DIGEST)
    req = push_targets_request(
        {"platform": "fcm", "token": "f1"},
        {"platform": "apns", "token": APNS_TOKEN},
        {"platform": "fcm", "token": "f1"},  # the same device twice: once
        tokens=("plain",),
    )
    item = plan(planner, req)
    found = [(d.status, d.reason, w.address if w else None) for d, _, w in deliveries(item)]
    assert found == [
        ("QUEUED", "", "plain"),  # a plain token is of the default platform, FCM here
        ("QUEUED", "", "fcm f1"),
        # No provider sends to APNs: suppressed at once, nothing queued for it.
        ("SUPPRESSED", "no_provider", None),
    ]


def test_the_work_items_of_a_campaigns_notification_name_the_campaign(planner: Planner) -> None:
    req = order(email="jane@example.com", push_tokens=("tok",))
    # Queued and, in quiet hours, delayed: each work item names it.
    for settings, now in ((None, NOON), (QUIET, LATE)):
        item = plan(planner, req, settings, now, key=notification_key("c-7", "user-42"))
        work = [work for _, _, work in deliveries(item) if work is not None]
        assert len(work) == 3
        assert {w.campaign for w in work} == {"c-7"}
    for key in ("order-1001", "campaign-c-7", "campaign:c-7"):  # a producer's own keys
        work = [work for _, _, work in deliveries(plan(planner, req, key=key)) if work]
        assert {w.campaign for w in work} == {""}


@pytest.mark.usefixtures("tracing_on")
def test_inside_a_request_span_each_work_item_carries_its_traceparent(planner: Planner) -> None:
    parent = tracing.context_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    with tracing.tracer().start_as_current_span("request", context=parent):
        written = tracing.traceparent()
        item = plan(planner, order(email="anna@example.com"))
    traces = {codec.decode_work_item(planned.item).trace for planned in item.work}
    assert traces == {written}
    assert written.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")


def test_without_tracing_work_items_are_written_as_before_traces(planner: Planner) -> None:
    item = plan(planner, order(email="anna@example.com"))
    for planned in item.work:
        assert json.loads(planned.item)[-1] == ""  # the campaign, the last field before traces
        # Neither the trace, nor how long it waits for an address (it has one), nor a send
        # time, nor the five fields of steps and fallbacks.
        assert len(json.loads(planned.item)) == len(WorkItem.__struct_fields__) - 8


def test_is_high_follows_the_type_and_a_priority_given_in_the_request(planner: Planner) -> None:
    otp = NotificationRequest(
        recipient=Recipient(id="u", phone="+4915112345678"), type="otp", data={"code": "1"}
    )
    assert planner.is_high(otp)
    assert not planner.is_high(REQUEST)  # marketing: LOW
    assert planner.is_high(msgspec.structs.replace(REQUEST, priority=Priority.HIGH))
    assert not planner.is_high(msgspec.structs.replace(otp, priority=Priority.NORMAL))
    assert not planner.is_high(msgspec.structs.replace(REQUEST, type="no-such-type"))


def waiting_planner(seconds: int) -> Planner:
    """The shipped catalog with order confirmations waiting ``seconds`` for an address."""
    text = (REPO / "clarion.toml").read_text()
    header = "[types.order_confirmed]\n"
    text = text.replace(header, f"{header}await_address_seconds = {seconds}\n", 1)
    return Planner(parse_catalog(text), DIGEST)


def test_a_type_that_waits_for_an_address_defers_instead_of_suppressing() -> None:
    item = plan(waiting_planner(600), order())  # no email, no device: both wait
    now_ms = int(NOON.timestamp() * 1000)
    assert fates(item) == [
        ("EMAIL", "SCHEDULED", "awaiting_address"),
        ("PUSH", "SCHEDULED", "awaiting_address"),
        ("IN_APP", "QUEUED", ""),
    ]
    for _, planned, work in deliveries(item)[:2]:
        assert planned is not None
        assert work is not None
        assert planned.due_ms == now_ms + 1000  # the first look, a second later
        assert (work.address, work.await_until_ms) == ("", now_ms + 600_000)
    deferred = [e for e in codec.decode_events(item.events) if isinstance(e, DeliveryDeferred)]
    assert [(e.reason, e.version) for e in deferred] == [("awaiting_address", 1)] * 2
    assert not [e for e in codec.decode_events(item.events) if isinstance(e, DeliverySuppressed)]


def test_a_wait_never_outlasts_the_notifications_ttl() -> None:
    req = msgspec.structs.replace(order(), ttl_seconds=60)
    [(_, _, work), *_] = deliveries(plan(waiting_planner(600), req))
    assert work is not None
    assert work.await_until_ms == int(NOON.timestamp() * 1000) + 60_000


def test_an_address_given_or_an_opt_out_goes_as_without_the_option() -> None:
    waiting = waiting_planner(600)
    assert fates(plan(waiting, order(email="anna@example.com")))[0] == ("EMAIL", "QUEUED", "")
    off = RecipientSettings(version=2, disabled=frozenset({("order_confirmed", "EMAIL")}))
    assert fates(plan(waiting, order(), off))[0] == ("EMAIL", "SUPPRESSED", "opted_out")


def test_a_waiting_delivery_shares_the_notifications_data_like_the_others() -> None:
    """The ``data:<id>`` hash counts every work item; each must release it when it ends."""
    req = msgspec.structs.replace(order(), data={"order_id": "1001", "note": "x" * 300})
    item = plan(waiting_planner(600), req)
    works = [work for _, _, work in deliveries(item) if work is not None]
    assert len(works) == 3
    assert all(work.shared_data and work.data == {} for work in works)
    assert item.shared_data
