"""When a notification is due: ``send_at``, ``delay`` and the horizon."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest

from app.ingest.requests import NotificationRequest
from app.ingest.schedule import ScheduleError, due_ms, duration_seconds

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
MONTH = 30 * 86400


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("PT15M", 900),
        ("PT1H", 3600),
        ("P1D", 86400),
        ("P1DT12H", 129600),
        ("P2W", 14 * 86400),
        ("PT0.5S", 0.5),
        ("PT1H30M5S", 5405),
    ],
)
def test_iso_durations(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize(
    "text",
    ["", "P", "PT", "P1DT", "1H", "PT1", "PT1.5M", "PTH", "PT1M1H", "P1Y", "P1M", "PT1X", "P1.D"],
)
def test_what_is_not_a_duration_is_named(text: str) -> None:
    with pytest.raises(ScheduleError, match="delay"):
        duration_seconds(text)


def test_years_and_months_are_refused_with_the_reason() -> None:
    with pytest.raises(ScheduleError, match="fixed length"):
        duration_seconds("P1M")


def test_a_long_duration_text_is_refused_before_it_is_read() -> None:
    with pytest.raises(ScheduleError, match="at most 64"):
        duration_seconds("PT" + "1" * 100 + "S")


def test_due_time_from_send_at_delay_or_now() -> None:
    later = NOW + timedelta(hours=1)
    assert due_ms(later, None, NOW_MS, MONTH) == NOW_MS + 3_600_000
    assert due_ms(None, 90, NOW_MS, MONTH) == NOW_MS + 90_000
    assert due_ms(None, "PT1M", NOW_MS, MONTH) == NOW_MS + 60_000
    assert due_ms(None, None, NOW_MS, MONTH) == 0
    # A time in the past (a producer's clock ahead of ours) goes at once.
    assert due_ms(NOW - timedelta(seconds=5), None, NOW_MS, MONTH) == 0
    assert due_ms(None, 0, NOW_MS, MONTH) == 0


def test_an_offset_names_the_same_instant() -> None:
    tokyo = timezone(timedelta(hours=9))
    assert due_ms(datetime(2026, 12, 6, 22, 0, tzinfo=tokyo), None, NOW_MS, MONTH) == (
        NOW_MS + 3_600_000
    )


def test_beyond_the_horizon_the_limit_is_named() -> None:
    with pytest.raises(ScheduleError, match=r"send_at: at most 30 days ahead"):
        due_ms(NOW + timedelta(days=31), None, NOW_MS, MONTH)
    with pytest.raises(ScheduleError, match=r"delay: at most 120 seconds ahead"):
        due_ms(None, 121, NOW_MS, 120)


def test_both_at_once_are_refused() -> None:
    with pytest.raises(ScheduleError, match="send_at, delay"):
        due_ms(NOW, 10, NOW_MS, MONTH)


def test_a_send_at_without_an_offset_is_refused_by_the_request() -> None:
    raw = b'{"recipient": {"id": "u"}, "type": "t", "send_at": "2026-12-06T12:00:00"}'
    with pytest.raises(msgspec.ValidationError, match="send_at"):
        msgspec.json.decode(raw, type=NotificationRequest)
    raw = b'{"recipient": {"id": "u"}, "type": "t", "delay": -1}'
    with pytest.raises(msgspec.ValidationError, match="delay"):
        msgspec.json.decode(raw, type=NotificationRequest)
