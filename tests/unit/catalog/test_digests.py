"""Digests in the catalog: a window or a daily time, a key made from the data, and every
refused value named by its type and key."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from app.catalog import CatalogError, parse_catalog
from app.catalog.digests import DigestError
from tests.unit.catalog.examples import VALID

NEWS = """
[types.comment]
channels = ["EMAIL"]
priority = "{priority}"
ttl_seconds = 3600
opt_out = true
digest = {digest}

[types.comment.templates.en]
EMAIL = {{ title = "{{{{ count }}}} new", body = "{{{{ count }}}} new" }}
"""


def with_digest(digest: str, priority: str = "NORMAL") -> str:
    return VALID + NEWS.format(digest=digest, priority=priority)


def refusal(digest: str, priority: str = "NORMAL") -> str:
    with pytest.raises(CatalogError) as error:
        parse_catalog(with_digest(digest, priority), "x.toml")
    return str(error.value)


def test_a_window_closes_that_long_after_the_first_notification() -> None:
    catalog = parse_catalog(with_digest('{ window = "10m", key = "{{ data.thread }}" }'))
    digest = catalog.digests["comment"]
    assert digest.closes_ms(1_000, "Europe/Berlin") == 601_000
    assert digest.key_of({"thread": "A-17"}) == "A-17"
    assert digest.max_items == 100


def test_a_daily_digest_closes_at_the_recipients_next_local_time() -> None:
    digest = parse_catalog(with_digest('{ at = "08:00" }')).digests["comment"]
    tokyo = ZoneInfo("Asia/Tokyo")
    before = datetime(2026, 12, 7, 7, 30, tzinfo=tokyo)
    after = datetime(2026, 12, 7, 9, 0, tzinfo=tokyo)
    expected_same_day = datetime(2026, 12, 7, 8, 0, tzinfo=tokyo)
    expected_next_day = datetime(2026, 12, 8, 8, 0, tzinfo=tokyo)
    assert digest.closes_ms(ms(before), "Asia/Tokyo") == ms(expected_same_day)
    assert digest.closes_ms(ms(after), "Asia/Tokyo") == ms(expected_next_day)
    # No time zone known (or an unknown one): UTC.
    noon = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    assert digest.closes_ms(ms(noon), "") == ms(datetime(2026, 12, 8, 8, 0, tzinfo=UTC))
    assert digest.closes_ms(ms(noon), "Mars/Olympus") == ms(datetime(2026, 12, 8, 8, 0, tzinfo=UTC))
    assert digest.key_of({"anything": 1}) == ""  # no key: one digest per recipient


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def test_a_key_that_needs_data_the_notification_lacks_is_refused() -> None:
    digest = parse_catalog(with_digest('{ window = "1m", key = "{{ data.thread }}" }'))
    with pytest.raises(DigestError, match="data: the digest key cannot be made"):
        digest.digests["comment"].key_of({})


@pytest.mark.parametrize(
    "data",
    [{"thread": "A-17"}, {"thread": 17}, {"thread": None}, {"thread": "x" * 300}, {"other": 1}],
)
def test_a_key_of_one_field_is_what_its_template_renders(data: dict[str, object]) -> None:
    read = parse_catalog(with_digest('{ window = "1m", key = "{{ data.thread }}" }'))
    rendered = parse_catalog(with_digest('{ window = "1m", key = "{{ data.thread | string }}" }'))
    assert read.digests["comment"].key_field == "thread"  # read straight from the data
    assert rendered.digests["comment"].key_field == ""  # rendered by its template
    try:
        expected = rendered.digests["comment"].key_of(data)
    except DigestError:
        with pytest.raises(DigestError):
            read.digests["comment"].key_of(data)
    else:
        assert read.digests["comment"].key_of(data) == expected


@pytest.mark.parametrize(
    ("digest", "message"),
    [
        (
            "{ max_items = 5 }",
            "types.comment.digest: give window or at (a daily digest), one of them",
        ),
        ('{ window = "1m", at = "08:00" }', "give window or at"),
        ('{ window = "2d" }', "types.comment.digest.window: '2d' is longer than a day"),
        ('{ window = "soon" }', "types.comment.digest.window: 'soon' is no duration"),
        ('{ at = "8am" }', "types.comment.digest.at: '8am' is no time of day: write HH:MM"),
        ('{ at = "24:00" }', "types.comment.digest.at: '24:00' is no time of day"),
        ('{ window = "1m", key = "{{ data.x" }', "types.comment.digest.key: line 1:"),
        ('{ window = "1m", max_items = 0 }', "types.comment.digest.max_items"),
        ('{ window = "1m", extra = 1 }', "extra"),
    ],
)
def test_each_refused_digest_names_its_key(digest: str, message: str) -> None:
    assert message in refusal(digest)


def test_a_high_type_is_never_digested() -> None:
    assert "a HIGH type is sent at once, never digested" in refusal('{ window = "1m" }', "HIGH")
