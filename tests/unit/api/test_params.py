"""Query parameters: each check lets a good value through and answers a bad one with a 422
whose detail starts with the parameter's name."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from litestar.exceptions import ClientException

from app.api.params import (
    MAX_TYPE_LENGTH,
    from_ms,
    one_of,
    page_size,
    query_schema,
    time_filter,
    type_filter,
)


def refused(check: Callable[..., Any], *args: Any) -> str:
    """The 422's detail of a refused value."""
    with pytest.raises(ClientException) as caught:
        check(*args)
    assert caught.value.status_code == 422
    return str(caught.value.detail)


def test_one_of_takes_an_allowed_value_or_nothing() -> None:
    assert one_of("channel", "SMS", ("SMS", "EMAIL")) == "SMS"
    assert one_of("channel", None, ("SMS", "EMAIL")) is None
    assert refused(one_of, "channel", "sms", ("SMS", "EMAIL")) == (
        "channel: must be one of SMS, EMAIL"
    )


def test_a_type_is_one_to_64_printable_characters() -> None:
    assert type_filter("order_confirmed") == "order_confirmed"
    assert type_filter("t" * MAX_TYPE_LENGTH) == "t" * MAX_TYPE_LENGTH
    assert type_filter(None) is None
    for bad in ("", "t" * (MAX_TYPE_LENGTH + 1), "otp\n", "otp\x00"):
        assert refused(type_filter, bad) == "type: 1-64 printable characters are required"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-29T12:00:00Z", datetime(2026, 11, 29, 12, tzinfo=UTC)),
        ("2026-11-29T12:00:00+02:00", datetime(2026, 11, 29, 10, tzinfo=UTC)),
        ("2026-11-29T12:00:00 02:00", datetime(2026, 11, 29, 10, tzinfo=UTC)),  # '+' unencoded
        ("2026-11-29T12:00:00", datetime(2026, 11, 29, 12, tzinfo=UTC)),  # no offset: UTC
        ("2026-11-29", datetime(2026, 11, 29, tzinfo=UTC)),
        (" 2026-11-29T12:00:00Z ", datetime(2026, 11, 29, 12, tzinfo=UTC)),
    ],
)
def test_a_time_is_iso_8601_and_utc_without_an_offset(text: str, expected: datetime) -> None:
    parsed = time_filter("since", text)
    assert parsed == expected
    assert parsed is not None
    assert parsed.tzinfo is not None


def test_a_time_keeps_the_offset_it_was_given() -> None:
    parsed = time_filter("until", "2026-11-29T12:00:00-05:00")
    assert parsed is not None
    assert parsed.utcoffset() == timedelta(hours=-5)
    assert parsed.tzinfo == timezone(timedelta(hours=-5))


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "12:00", "2026-11-29T12:00:00 ab:cd"])
def test_a_time_that_is_not_one_names_the_parameter(text: str) -> None:
    assert refused(time_filter, "until", text).startswith("until: must be an ISO 8601 time")
    assert time_filter("until", None) is None


@pytest.mark.parametrize(
    "text",
    [
        "0001-01-01T00:00:00+14:00",  # valid ISO 8601, but before year 1 in UTC
        "0001-01-01T00:00:00 14:00",  # the same with its '+' unencoded
        "9999-12-31T23:59:59-14:00",  # after year 9999 in UTC
        "9999-12-31T23:59:59.999999-00:01",
    ],
)
def test_a_time_outside_the_years_1_to_9999_in_utc_names_the_parameter(text: str) -> None:
    assert refused(time_filter, "since", text) == (
        "since: must be from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z"
    )


def test_the_first_and_last_times_in_utc_are_fine() -> None:
    assert time_filter("since", "0001-01-01T00:00:00-14:00") == datetime(1, 1, 1, 14, tzinfo=UTC)
    assert time_filter("until", "9999-12-31T23:59:59.999999Z") == datetime.max.replace(tzinfo=UTC)


def test_a_page_size_is_a_whole_number_within_bounds() -> None:
    assert page_size(None, 50, 500) == 50
    assert page_size("1", 50, 500) == 1
    assert page_size(" 500 ", 50, 500) == 500
    for bad in ("0", "501", "-1", "ten", "1.5", "00001", ""):
        assert refused(page_size, bad, 50, 500) == "limit: must be an integer from 1 to 500"


def test_milliseconds_become_a_utc_time() -> None:
    assert from_ms(0) == datetime(1970, 1, 1, tzinfo=UTC)
    assert from_ms(1_764_417_600_123) == datetime(2025, 11, 29, 12, 0, 0, 123000, tzinfo=UTC)


def test_an_optional_parameter_is_documented_as_its_plain_type() -> None:
    schema = query_schema(enum=["A", "B"])
    assert schema["one_of"] is None  # not "string or null": an absent parameter is absent
    assert schema["enum"] == ["A", "B"]
