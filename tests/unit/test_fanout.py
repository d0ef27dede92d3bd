"""Fan-out: from one request to one planned delivery per channel and address."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from app.api.schemas import NotificationRequest, Recipient
from app.catalog import load_catalog
from app.fanout import FanoutError, Planner, fingerprint
from streams import codec
from streams.events import (
    DeliveryDeferred,
    DeliveryEvent,
    DeliveryExpired,
    DeliveryQueued,
    DeliverySuppressed,
    NotificationAccepted,
    QuietHoursSetting,
)
from streams.ingest import IngestItem
from streams.keys import ShardKeys, shard_from_id
from streams.recipient_settings import RecipientSettings

REPO = Path(__file__).resolve().parents[2]
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
    return Planner(load_catalog(REPO / "clarion.toml"))


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
) -> IngestItem:
    return planner.plan(
        shard=SHARD,
        producer="orders",
        idempotency_key="order-1001",
        request=req,
        identity=planner.identity(SHARD, req),
        settings=settings or RecipientSettings(),
        now=now,
    )


def fates(item: IngestItem) -> list[tuple[str, str, str]]:
    """(channel, status, reason) of each delivery, in fan-out order."""
    return [
        (str(d.fields["channel"]), str(d.fields["status"]), str(d.fields.get("reason", "")))
        for d in item.deliveries
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
    email, push, in_app = item.deliveries
    assert (email.target, push.target, in_app.target) == ("normal", "none", "normal")
    assert push.work_item == b""
    work = codec.decode_work_item(email.work_item)
    assert (work.address, work.channel, work.data) == (
        "jane@example.com",
        "EMAIL",
        {"order_id": "1001"},
    )
    assert codec.decode_work_item(in_app.work_item).address == "user-42"


def test_each_push_token_gets_its_own_delivery(planner: Planner) -> None:
    item = plan(planner, order(email="jane@example.com", push_tokens=("tok-a", "tok-b", "tok-a")))
    pushes = [d for d in item.deliveries if d.fields["channel"] == "PUSH"]
    assert len(pushes) == 2
    addresses = [codec.decode_work_item(d.work_item).address for d in pushes]
    assert addresses == ["tok-a", "tok-b"]
    assert len({d.delivery_id for d in item.deliveries}) == 4


def test_a_switched_off_type_and_channel_is_suppressed(planner: Planner) -> None:
    settings = RecipientSettings(version=2, disabled=frozenset({("marketing", "EMAIL")}))
    req = request(
        "marketing", {"subject": "Sale", "body": "-20 %"}, email="j@example.com", push_tokens=("t",)
    )
    item = plan(planner, req, settings)
    assert fates(item) == [("EMAIL", "SUPPRESSED", "opted_out"), ("PUSH", "QUEUED", "")]
    assert item.deliveries[1].target == "low"
    assert item.settings_version == 2


def test_a_type_that_cannot_be_switched_off_is_sent_anyway(planner: Planner) -> None:
    settings = RecipientSettings(disabled=frozenset({("otp", "SMS")}))
    item = plan(planner, request("otp", {"code": "1"}, phone="+4915112345678"), settings)
    assert fates(item) == [("SMS", "QUEUED", "")]


def test_quiet_hours_defer_a_normal_email_until_the_window_ends(planner: Planner) -> None:
    item = plan(planner, order(email="jane@example.com", push_tokens=("tok",)), QUIET, LATE)
    assert fates(item) == [
        ("EMAIL", "SCHEDULED", ""),
        ("PUSH", "SCHEDULED", ""),
        ("IN_APP", "QUEUED", ""),
    ]
    email, push, in_app = item.deliveries
    due_ms = int(QUIET_END.timestamp() * 1000)
    assert (email.target, email.due_ms, email.fields["due_ms"]) == ("delayed", due_ms, due_ms)
    assert push.target == "delayed"
    assert push.due_ms == due_ms
    # IN_APP lands silently in an inbox: not deferred.
    assert (in_app.target, in_app.due_ms) == ("normal", 0)
    # A deferred delivery still has its work item, waiting in the delayed set.
    assert codec.decode_work_item(email.work_item).address == "jane@example.com"
    deferred = codec.decode_event(item.events[1])
    assert isinstance(deferred, DeliveryDeferred)
    assert (deferred.reason, deferred.until) == ("quiet_hours", QUIET_END)


def test_quiet_hours_do_not_hold_back_high_priority(planner: Planner) -> None:
    item = plan(planner, request("otp", {"code": "1"}, phone="+4915112345678"), QUIET, LATE)
    assert fates(item) == [("SMS", "QUEUED", "")]
    assert item.deliveries[0].target == "high"


def test_a_requested_high_priority_is_not_held_back_either(planner: Planner) -> None:
    req = order(email="jane@example.com", priority="HIGH")
    item = plan(planner, req, QUIET, LATE)
    assert fates(item)[0] == ("EMAIL", "QUEUED", "")
    assert item.deliveries[0].target == "high"


def test_outside_quiet_hours_nothing_is_deferred(planner: Planner) -> None:
    item = plan(planner, order(email="jane@example.com"), QUIET, NOON)
    assert fates(item)[0] == ("EMAIL", "QUEUED", "")


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
    assert all(d.target == "none" and d.work_item == b"" for d in item.deliveries)
    assert all(isinstance(codec.decode_event(raw), DeliveryExpired) for raw in item.events[1:])


def test_the_events_record_the_acceptance_and_each_fate(planner: Planner) -> None:
    req = order(email="jane@example.com")
    item = plan(planner, req, QUIET, LATE)
    events = [codec.decode_event(raw) for raw in item.events]
    accepted, *per_delivery = events
    assert isinstance(accepted, NotificationAccepted)
    assert accepted.notification_id == item.notification_id
    assert accepted.producer == "orders"
    assert accepted.idempotency_key == "order-1001"
    assert accepted.notification_type == "order_confirmed"
    assert accepted.priority == "NORMAL"
    assert accepted.locale == "en"
    assert accepted.expires_at == LATE + timedelta(seconds=172800)
    assert accepted.delivery_ids == [d.delivery_id for d in item.deliveries]
    assert [type(event) for event in per_delivery] == [
        DeliveryDeferred,
        DeliverySuppressed,
        DeliveryQueued,
    ]
    for event, delivery in zip(per_delivery, item.deliveries, strict=True):
        assert isinstance(event, DeliveryEvent)
        assert event.delivery_id == delivery.delivery_id
        assert event.notification_id == item.notification_id
        assert event.version == 1
        assert delivery.fields["version"] == 1
    assert isinstance(per_delivery[1], DeliverySuppressed)
    assert per_delivery[1].reason == "no_address"


def test_events_carry_no_contact_address(planner: Planner) -> None:
    req = order(email="jane@example.com", push_tokens=("secret-push-token",))
    item = plan(planner, req)
    for raw in item.events:
        assert b"jane@example.com" not in raw
        assert b"secret-push-token" not in raw


def test_the_response_lists_every_delivery_with_its_status(planner: Planner) -> None:
    item = plan(planner, order(email="jane@example.com"), QUIET, LATE)
    response = json.loads(item.response)
    assert response["id"] == item.notification_id
    assert response["deliveries"] == [
        {"id": d.delivery_id, "channel": d.fields["channel"], "status": d.fields["status"]}
        for d in item.deliveries
    ]
    assert [entry["status"] for entry in response["deliveries"]] == [
        "SCHEDULED",
        "SUPPRESSED",
        "QUEUED",
    ]


def test_ttl_and_times_are_recorded_in_milliseconds(planner: Planner) -> None:
    item = plan(planner, request("otp", {"code": "1"}, phone="+4915112345678"), now=NOON)
    now_ms = int(NOON.timestamp() * 1000)
    fields = item.deliveries[0].fields
    assert fields["created_ms"] == now_ms
    assert fields["expires_ms"] == now_ms + 300_000
    assert item.notification_fields["expires_ms"] == now_ms + 300_000
    assert item.notification_fields["type"] == "otp"


def test_the_same_request_has_the_same_fingerprint_whatever_the_key_order() -> None:
    first = request("marketing", {"subject": "S", "body": "B", "extra": {"a": 1, "b": 2}})
    second = request("marketing", {"extra": {"b": 2, "a": 1}, "body": "B", "subject": "S"})
    assert list(first.data) != list(second.data)
    assert fingerprint(first) == fingerprint(second)


def test_a_different_body_has_a_different_fingerprint() -> None:
    first = request("marketing", {"subject": "S", "body": "B"})
    assert fingerprint(first) != fingerprint(request("marketing", {"subject": "S", "body": "C"}))
    assert fingerprint(first) != fingerprint(
        request("marketing", {"subject": "S", "body": "B"}, email="jane@example.com")
    )
    assert fingerprint(first) != fingerprint(
        request("marketing", {"subject": "S", "body": "B"}, ttl_seconds=60)
    )


def test_the_plan_carries_the_request_fingerprint(planner: Planner) -> None:
    req = order(email="jane@example.com")
    assert plan(planner, req).fingerprint == fingerprint(req)
