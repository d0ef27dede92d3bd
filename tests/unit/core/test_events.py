"""The event contract: round trips, and old encoded events that must stay readable."""

from __future__ import annotations

import json
import typing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec
import pytest

from streams.core import codec
from streams.core.events import (
    AnyEvent,
    DeliveryAttemptFailed,
    DeliveryDeferred,
    DeliveryExpired,
    DeliveryQueued,
    DeliveryScheduled,
    DeliverySent,
    DeliverySkipped,
    Event,
    NotificationAccepted,
    PreferenceChanged,
    PreferenceEntry,
    ProviderFeedbackReceived,
    QuietHoursSetting,
)
from tests.unit.event_examples import DELIVERY, DID, EXAMPLES

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "events_v1.jsonl"
EVENT_CLASSES = set(typing.get_args(AnyEvent))


def fixture_lines() -> list[str]:
    return [line for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_examples_cover_every_event_class() -> None:
    assert {type(event) for event in EXAMPLES} == EVENT_CLASSES


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda event: type(event).__name__)
def test_every_event_round_trips(event: Event) -> None:
    raw = codec.encode(event)
    assert json.loads(raw)["type"] == type(event).__name__
    decoded = codec.decode_event(raw)
    assert type(decoded) is type(event)
    assert decoded == event


def test_a_time_with_an_offset_keeps_its_instant() -> None:
    at = datetime(2026, 1, 15, 11, 30, tzinfo=timezone(timedelta(hours=2)))
    event = DeliveryExpired(at=at, **DELIVERY, channel="EMAIL")
    decoded = codec.decode_event(codec.encode(event))
    assert decoded.at == datetime(2026, 1, 15, 9, 30, tzinfo=UTC)


def test_an_unknown_event_type_is_refused() -> None:
    raw = b'{"type":"DeliveryTeleported","at":"2026-01-15T09:30:00Z"}'
    with pytest.raises(msgspec.ValidationError):
        codec.decode_event(raw)


def test_an_event_without_a_type_tag_is_refused() -> None:
    raw = codec.encode(EXAMPLES[1]).replace(b'"type":"DeliveryQueued",', b"")
    with pytest.raises(msgspec.ValidationError):
        codec.decode_event(raw)


def test_an_event_missing_a_required_field_is_refused() -> None:
    raw = b'{"type":"DeliverySent","at":"2026-01-15T09:30:00Z","notification_id":"n"}'
    with pytest.raises(msgspec.ValidationError):
        codec.decode_event(raw)


# Event classes with more than one stored line: a line for each shape the class was written
# in (DeliveryScheduled: before escalation steps and fallbacks, a step, a fallback).
SHAPES = {"DeliveryScheduled": 3}


def test_the_fixture_has_a_line_per_event_class_and_shape() -> None:
    names = [json.loads(line)["type"] for line in fixture_lines()]
    assert sorted(names) == sorted(
        name for cls in EVENT_CLASSES for name in [cls.__name__] * SHAPES.get(cls.__name__, 1)
    )


@pytest.mark.parametrize("line", fixture_lines(), ids=lambda line: json.loads(line)["type"])
def test_every_stored_event_still_decodes(line: str) -> None:
    stored: dict[str, Any] = json.loads(line)
    event = codec.decode_event(line)
    assert type(event).__name__ == stored["type"]
    assert event.at.tzinfo is not None
    assert event.at == datetime.fromisoformat(stored["at"])
    # Re-encoding keeps every stored field with its value, or leaves it out at its default
    # (an event class that omits defaults); new fields may only be added.
    again = json.loads(codec.encode(event))
    defaults = {field.encode_name: field.default for field in msgspec.structs.fields(event)}
    assert {key: again.get(key, defaults.get(key)) for key in stored} == stored


def test_stored_events_decode_with_their_values() -> None:
    events = {
        type(event).__name__: event
        for event in map(codec.decode_event, fixture_lines())
        if not isinstance(event, DeliveryScheduled)
    }

    accepted = events["NotificationAccepted"]
    assert isinstance(accepted, NotificationAccepted)
    assert accepted.notification_type == "order_confirmed"
    assert accepted.expires_at == datetime(2026, 1, 17, 9, 30, 0, 125000, tzinfo=UTC)
    assert len(accepted.delivery_ids) == 2

    deferred = events["DeliveryDeferred"]
    assert isinstance(deferred, DeliveryDeferred)
    assert (deferred.reason, deferred.until) == (
        "quiet_hours",
        datetime(2026, 1, 16, 7, 0, tzinfo=UTC),
    )

    failed = events["DeliveryAttemptFailed"]
    assert isinstance(failed, DeliveryAttemptFailed)
    assert (failed.version, failed.attempt, failed.error_class) == (2, 1, "TRANSIENT")
    assert failed.retry_at == datetime(2026, 1, 15, 9, 30, 6, tzinfo=UTC)

    sent = events["DeliverySent"]
    assert isinstance(sent, DeliverySent)
    assert (sent.delivery_id, sent.provider_message_id) == (DID, "sbx-0001")

    feedback = events["ProviderFeedbackReceived"]
    assert isinstance(feedback, ProviderFeedbackReceived)
    assert (feedback.feedback, feedback.detail) == ("bounced", "mailbox full")

    changed = events["PreferenceChanged"]
    assert isinstance(changed, PreferenceChanged)
    assert changed.preferences == [
        PreferenceEntry(type="marketing", channel="EMAIL", enabled=False)
    ]
    assert changed.quiet_hours == QuietHoursSetting(
        start="22:00", end="08:00", timezone="Europe/Berlin"
    )


def test_an_event_from_a_newer_version_with_an_extra_field_still_decodes() -> None:
    line = next(line for line in fixture_lines() if '"DeliverySent"' in line)
    newer = json.loads(line) | {"cost_cents": 3, "region": {"name": "eu"}}
    event = codec.decode_event(json.dumps(newer))
    assert isinstance(event, DeliverySent)
    assert event.provider_message_id == "sbx-0001"


def test_an_event_without_a_field_added_later_uses_its_default() -> None:
    raw = (
        b'{"type":"DeliveryQueued","at":"2026-01-15T09:30:00Z","notification_id":"n",'
        b'"delivery_id":"d","version":1,"channel":"SMS","priority":"HIGH"}'
    )
    event = codec.decode_event(raw)
    assert isinstance(event, DeliveryQueued)
    assert event.attempt == 0


def test_a_stored_step_a_fallback_and_a_skip_decode_with_their_values() -> None:
    stored = [codec.decode_event(line) for line in fixture_lines()]
    scheduled = [event for event in stored if isinstance(event, DeliveryScheduled)]
    # Written before steps and fallbacks: neither.
    assert [(s.step, s.unless, s.fallback_of) for s in scheduled] == [
        (0, [], ""),
        (2, ["read", "delivered"], ""),
        (0, [], "019bc123-4567-7abc-8def-0123456789a1"),
    ]
    assert scheduled[2].until == scheduled[2].at  # a fallback is due at once
    skipped = next(event for event in stored if isinstance(event, DeliverySkipped))
    assert (skipped.channel, skipped.step, skipped.reason, skipped.because_of) == (
        "SMS", 2, "read", DID,
    )  # fmt: skip
