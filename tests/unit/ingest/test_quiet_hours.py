"""Quiet hours: checking a setting and finding when a window ends, across DST changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.ingest import quiet_hours
from app.ingest.quiet_hours import QuietHoursError, check, window_end
from streams.core.events import QuietHoursSetting

BERLIN = ZoneInfo("Europe/Berlin")


def setting(start: str, end: str, timezone: str = "Europe/Berlin") -> QuietHoursSetting:
    return QuietHoursSetting(start=start, end=end, timezone=timezone)


NIGHT = setting("22:00", "08:00")


def test_a_good_setting_passes() -> None:
    check(NIGHT)
    check(setting("00:00", "23:59", "UTC"))


@pytest.mark.parametrize(
    ("start", "end", "timezone", "field"),
    [
        ("25:00", "08:00", "Europe/Berlin", "start"),
        ("22:60", "08:00", "Europe/Berlin", "start"),
        ("22:00", "8:00", "Europe/Berlin", "end"),
        ("22:00", "08:00:00", "Europe/Berlin", "end"),
        ("22:00", "22:00", "Europe/Berlin", "end"),
        ("22:00", "08:00", "Mars/Olympus", "timezone"),
        ("22:00", "08:00", "", "timezone"),
        ("22:00", "08:00", "../../etc/passwd", "timezone"),
    ],
)
def test_a_bad_setting_names_the_field(start: str, end: str, timezone: str, field: str) -> None:
    with pytest.raises(QuietHoursError) as caught:
        check(setting(start, end, timezone))
    assert str(caught.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    "timezone",
    [
        "Europe",  # a directory of the tz database
        "America/Argentina",
        "x" * 300,  # longer than a file name may be
        "Europe/" + "a" * 5000,
        "Europe/../Europe/Berlin",
        "Europe/Berlin/",
        "Europe//Berlin",
        "./UTC",
        "/etc/localtime",
        "/usr/share/zoneinfo/UTC",
        "Europe/Berlin\x00",
        "UTC\n",
        " UTC",
        "utc",
        "localtime",  # the host's own zone, on some systems
        "zone.tab",  # a file of the tz database that is no zone
        "tzdata.zi",
        "posixrules",
        "\udc80",
        "Europe/Berlin\u0301",
    ],
)
def test_every_name_that_is_no_iana_zone_names_the_timezone(timezone: str) -> None:
    with pytest.raises(QuietHoursError) as caught:
        check(setting("22:00", "08:00", timezone))
    message = str(caught.value)
    assert message.startswith("timezone: ")
    assert message.endswith(" is not an IANA time zone like Europe/Berlin")
    assert len(message) < 200  # a long name is not echoed in full


@pytest.mark.parametrize(
    "timezone", ["Europe/Berlin", "America/Argentina/Buenos_Aires", "UTC", "Etc/GMT+5"]
)
def test_iana_zones_pass(timezone: str) -> None:
    check(setting("22:00", "08:00", timezone))


def test_a_stored_setting_is_used_even_if_its_zone_is_no_longer_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(quiet_hours, "_iana_zones", frozenset)  # as if no zone were listed
    with pytest.raises(QuietHoursError):
        check(NIGHT)
    assert window_end(NIGHT, datetime(2026, 6, 1, 23, 0, tzinfo=BERLIN)) is not None


@pytest.mark.parametrize("timezone", ["Europe", "x" * 300, "a\x00b", "/etc/localtime"])
def test_a_stored_setting_with_an_unusable_zone_fails_as_a_quiet_hours_error(timezone: str) -> None:
    with pytest.raises(QuietHoursError):
        window_end(setting("22:00", "08:00", timezone), datetime(2026, 6, 1, 23, 0, tzinfo=UTC))


def test_outside_the_window_there_is_no_end() -> None:
    assert window_end(NIGHT, datetime(2026, 6, 1, 12, 0, tzinfo=BERLIN)) is None
    assert window_end(NIGHT, datetime(2026, 6, 1, 8, 0, tzinfo=BERLIN)) is None
    assert window_end(NIGHT, datetime(2026, 6, 1, 21, 59, tzinfo=BERLIN)) is None


def test_a_same_day_window() -> None:
    siesta = setting("13:00", "15:00")
    # 14:00 CEST is 12:00 UTC; the window ends 15:00 CEST = 13:00 UTC the same day.
    assert window_end(siesta, datetime(2026, 6, 1, 14, 0, tzinfo=BERLIN)) == datetime(
        2026, 6, 1, 13, 0, tzinfo=UTC
    )
    assert window_end(siesta, datetime(2026, 6, 1, 13, 0, tzinfo=BERLIN)) is not None
    assert window_end(siesta, datetime(2026, 6, 1, 12, 59, tzinfo=BERLIN)) is None
    assert window_end(siesta, datetime(2026, 6, 1, 15, 0, tzinfo=BERLIN)) is None
    assert window_end(siesta, datetime(2026, 6, 1, 23, 0, tzinfo=BERLIN)) is None


def test_a_window_across_midnight_before_midnight_ends_the_next_morning() -> None:
    end = window_end(NIGHT, datetime(2026, 6, 1, 23, 0, tzinfo=BERLIN))
    assert end == datetime(2026, 6, 2, 8, 0, tzinfo=BERLIN)
    assert end == datetime(2026, 6, 2, 6, 0, tzinfo=UTC)


def test_a_window_across_midnight_after_midnight_ends_the_same_morning() -> None:
    end = window_end(NIGHT, datetime(2026, 6, 2, 3, 0, tzinfo=BERLIN))
    assert end == datetime(2026, 6, 2, 6, 0, tzinfo=UTC)


def test_now_may_be_given_in_utc() -> None:
    # 21:30 UTC is 23:30 CEST: inside the recipient's window, though 21:30 is not in UTC.
    end = window_end(NIGHT, datetime(2026, 6, 1, 21, 30, tzinfo=UTC))
    assert end == datetime(2026, 6, 2, 6, 0, tzinfo=UTC)


def test_the_end_is_in_utc() -> None:
    end = window_end(NIGHT, datetime(2026, 6, 1, 23, 0, tzinfo=BERLIN))
    assert end is not None
    assert end.utcoffset() == timedelta(0)


def test_a_window_over_the_spring_change_ends_at_local_eight_in_summer_time() -> None:
    # 2026-03-28 23:00 CET (UTC+1); clocks jump at 02:00 on the 29th; 08:00 CEST = 06:00 UTC.
    now = datetime(2026, 3, 28, 23, 0, tzinfo=BERLIN)
    assert now.utcoffset() == timedelta(hours=1)
    assert window_end(NIGHT, now) == datetime(2026, 3, 29, 6, 0, tzinfo=UTC)


def test_a_window_over_the_autumn_change_ends_at_local_eight_in_winter_time() -> None:
    # 2026-10-24 23:30 CEST (UTC+2); clocks fall back at 03:00 on the 25th; 08:00 CET = 07:00 UTC.
    now = datetime(2026, 10, 24, 23, 30, tzinfo=BERLIN)
    assert now.utcoffset() == timedelta(hours=2)
    assert window_end(NIGHT, now) == datetime(2026, 10, 25, 7, 0, tzinfo=UTC)


def test_an_end_inside_the_spring_gap_is_shifted_by_the_gap() -> None:
    # 02:30 does not exist on 2026-03-29; read with CET it is 01:30 UTC = 03:30 CEST.
    window = setting("01:00", "02:30")
    now = datetime(2026, 3, 29, 1, 15, tzinfo=BERLIN)
    end = window_end(window, now)
    assert end == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert end is not None
    assert end.astimezone(BERLIN).replace(tzinfo=None) == datetime(2026, 3, 29, 3, 30)


def test_an_ambiguous_end_in_autumn_takes_the_later_occurrence() -> None:
    # 02:30 happens twice on 2026-10-25: 00:30 UTC (CEST) and 01:30 UTC (CET).
    window = setting("01:00", "02:30")
    now = datetime(2026, 10, 25, 1, 15, tzinfo=BERLIN)
    assert window_end(window, now) == datetime(2026, 10, 25, 1, 30, tzinfo=UTC)


def test_new_york_spring_change() -> None:
    new_york = ZoneInfo("America/New_York")
    # DST starts 2026-03-08; 23:00 EST (UTC-5) -> 07:00 EDT (UTC-4) = 11:00 UTC.
    window = setting("22:00", "07:00", "America/New_York")
    now = datetime(2026, 3, 7, 23, 0, tzinfo=new_york)
    assert window_end(window, now) == datetime(2026, 3, 8, 11, 0, tzinfo=UTC)


def test_a_half_hour_zone() -> None:
    # Asia/Kolkata is UTC+05:30 all year: 17:00 UTC is 22:30 IST, 06:00 IST is 00:30 UTC.
    window = setting("22:00", "06:00", "Asia/Kolkata")
    assert window_end(window, datetime(2026, 1, 1, 17, 0, tzinfo=UTC)) == datetime(
        2026, 1, 2, 0, 30, tzinfo=UTC
    )
    # 16:00 UTC is 21:30 IST: outside.
    assert window_end(window, datetime(2026, 1, 1, 16, 0, tzinfo=UTC)) is None
