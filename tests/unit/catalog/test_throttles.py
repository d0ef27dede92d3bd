"""Throttles in the catalog: the duration parser, the default cap's text, a type's own
throttle winning over its category's, the default cap sparing HIGH, and every refused value
named by its type (or category) and field."""

from __future__ import annotations

import time

import pytest

from app.catalog import parse_catalog
from app.catalog.throttles import (
    DEFAULT_SCOPE,
    Rule,
    ThrottleError,
    log_scopes,
    parse_cap,
    parse_duration,
    rules_of,
)
from streams.core.vocabulary import Channel, Priority
from tests.unit.catalog.examples import VALID, catalog_error

NEWS = """
[types.news]
channels = ["EMAIL", "SMS"]
priority = "LOW"
ttl_seconds = 3600
opt_out = true
{extra}

[types.news.templates.en]
EMAIL = {{ title = "News", body = "News" }}
SMS = {{ body = "News" }}
"""


def with_news(extra: str = "", tail: str = "") -> str:
    return VALID + NEWS.format(extra=extra) + tail


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("10m", 600), ("1h", 3600), ("1d", 86400), ("0090s", 90), ("30d", 2592000)],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "h", "1", "1y", "1.5h", "-1h", "1 h", " 1h", "1H", "0s", "31d", "1h1", "\u0661h"]
)
def test_what_is_no_duration(text: str) -> None:
    with pytest.raises(ThrottleError):
        parse_duration(text)


def test_the_duration_parser_takes_linear_time_on_hostile_text() -> None:
    started = time.perf_counter()
    for text in ("9" * 100_000 + "x", "1" * 1_000_000, "h" * 1_000_000):
        with pytest.raises(ThrottleError):
            parse_duration(text)
    assert time.perf_counter() - started < 0.5


def test_the_default_cap() -> None:
    assert parse_cap("100/1h") == (100, 3600)
    assert parse_cap(" 5/30s ") == (5, 30)
    assert parse_cap("") is None
    for bad in ("100", "/1h", "0/1h", "x/1h", "100/1y", "100/", "1e3/1h", "100001/1h"):
        with pytest.raises(ThrottleError):
            parse_cap(bad)


def test_a_types_throttle_wins_over_its_categorys() -> None:
    categories = '\n[categories.social]\nthrottle = { limit = 2, per = "10m" }\n'
    shared = parse_catalog(with_news('category = "social"', categories))
    assert shared.throttles["news"] == Rule("c:social", 2, 600, "suppress")
    own = parse_catalog(
        with_news(
            'category = "social"\n'
            'throttle = { limit = 3, per = "1h", channels = ["EMAIL"], action = "defer" }',
            categories,
        )
    )
    rule = own.throttles["news"]
    assert rule == Rule("t:news", 3, 3600, "defer", frozenset({Channel.EMAIL}), per_channel=True)
    assert rule.applies_to(Channel.EMAIL)
    assert not rule.applies_to(Channel.SMS)
    assert rule.key_scope(Channel.EMAIL) == "t:news:EMAIL"
    assert "otp" not in own.throttles
    assert parse_catalog(VALID).throttles == {}


def test_a_category_without_a_throttle_throttles_nothing() -> None:
    catalog = parse_catalog(with_news('category = "social"', "\n[categories.social]\n"))
    assert catalog.throttles == {}


def test_the_default_cap_spares_high_and_types_with_their_own() -> None:
    own = Rule("t:news", 3, 3600, "defer")
    priorities = {"otp": Priority.HIGH, "news": Priority.LOW, "order": Priority.NORMAL}
    rules = rules_of({"news": own}, priorities, (100, 3600))
    assert rules["news"] is own
    assert "otp" not in rules
    assert rules["order"] == Rule(DEFAULT_SCOPE, 100, 3600, "suppress", per_channel=True)
    assert rules["order"].key_scope(Channel.SMS) == "default:SMS"
    assert rules_of({}, priorities, None) == {}
    # A HIGH type's own throttle applies whatever its priority.
    high = Rule("t:otp", 5, 60, "suppress")
    assert rules_of({"otp": high}, priorities, None) == {"otp": high}


@pytest.mark.parametrize(
    ("throttle", "key", "words"),
    [
        ('{ limit = 3, per = "1y" }', "types.news.throttle.per", "no duration"),
        ('{ limit = 3, per = "45d" }', "types.news.throttle.per", "outside"),
        ('{ limit = 0, per = "1h" }', "types.news.throttle.limit", ">= 1"),
        ('{ limit = 3 }', "types.news.throttle", "per"),
        ('{ limit = 3, per = "1h", action = "drop" }', "types.news.throttle.action", "drop"),
        ('{ limit = 3, per = "1h", channels = [] }', "types.news.throttle.channels", ""),
        ('{ limit = 3, per = "1h", channels = ["FAX"] }', "types.news.throttle.channels", ""),
        ('{ limit = 3, per = "1h", channels = ["PUSH"] }', "types.news.throttle.channels",
         "PUSH is not one of the type's channels"),
        ('{ limit = 3, per = "1h", burst = 2 }', "types.news.throttle", "burst"),
    ],
)  # fmt: skip
def test_a_bad_throttle_names_its_type_and_field(throttle: str, key: str, words: str) -> None:
    error = catalog_error(with_news(f"throttle = {throttle}"))
    assert f"x.toml: {key}" in error
    assert words in error


def test_bad_categories_name_their_key() -> None:
    error = catalog_error(with_news('category = "social"'))
    assert "types.news.category" in error
    assert "'social' is not in [categories]" in error
    error = catalog_error(
        with_news("", '\n[categories.social]\nthrottle = { limit = 1, per = "1w" }\n')
    )
    assert "categories.social.throttle.per" in error
    error = catalog_error(with_news("", "\n[categories.Social]\n"))
    assert "categories.Social" in error
    error = catalog_error(with_news("", "\n[categories.social]\nlimit = 3\n"))
    assert "categories.social" in error


def test_the_scopes_an_erasure_deletes() -> None:
    priorities = {"otp": Priority.HIGH, "news": Priority.LOW, "order": Priority.NORMAL}
    own = {"news": Rule("t:news", 3, 3600, "suppress")}
    scopes = log_scopes(own, priorities, (100, 3600))
    assert {"t:news", "t:news:EMAIL", "default", "default:SMS"} <= set(scopes)
    assert len(scopes) == 2 * (1 + len(Channel))
    assert log_scopes({}, priorities, None) == []
