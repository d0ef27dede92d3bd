"""What an operator may ask of the dead-letter queue, and what they see: every mistake names
its field; views name the template data but never show it, nor the address, and mask error
texts."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime

import msgspec
import pytest

from app.catalog import Catalog
from app.operations.dlq import (
    DEFAULT_SAMPLES,
    MAX_SAMPLES,
    DlqRequestError,
    ReplayBody,
    letter_view,
    replay_order,
    replay_view,
    samples_count,
    selection,
    summary_view,
)
from streams.dlq.entries import DeadLetter, Resolution
from streams.dlq.replay import SKIP_REASONS, ReplayOrder, ReplayReport, ReplayResult
from streams.dlq.scan import Selection, Summary
from tests.unit.delivery_examples import ITEM

ID = "01a22000-0000-7000-8000-00000000000a"
ADDRESS = "+4915112345678"
LETTER = DeadLetter(
    shard=0, entry_id="1764417600000-0", error_class="PERMANENT",
    last_error=f"number {ADDRESS} of jane@example.com does not exist", delivery_id="d",
    notification_id="n", notification_type="otp", channel="SMS", priority="HIGH", attempts=2,
    first_attempt_ms=1_764_417_500_000, last_attempt_ms=1_764_417_599_000, worker="host-1",
    worker_version="1.0", version=5, work_entry_id="7-0",
    work=msgspec.structs.replace(ITEM, data={"code": "424242", "name": "Jane Doe"}),
    other_fields=("raw_unexpected",),
)  # fmt: skip


def refusal(call: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(DlqRequestError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return str(caught.value)


FIRST, LAST = "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"notification_type": "invoice"}, "type: unknown notification type 'invoice'; known: "
                                           "marketing, order_confirmed, otp, security_alert"),
        ({"channel": "FAX"}, "channel: must be one of PUSH, EMAIL, SMS, IN_APP, WEBHOOK"),
        ({"error_class": "OOPS"}, "error_class: must be one of TRANSIENT, PERMANENT, POISON, BUG"),
        ({"since": "yesterday"}, "since: must be an ISO 8601 time, e.g. 2026-11-29T12:00:00Z"),
        ({"until": "1970-01-01T00:00:00Z"}, "until: must be later than 1970-01-01T00:00:00Z"),
        # Valid ISO 8601, but before year 1 or after year 9999 in UTC.
        ({"since": "0001-01-01T00:00:00+14:00"}, f"since: must be from {FIRST} to {LAST}"),
        ({"until": "9999-12-31T23:59:59-14:00"}, f"until: must be from {FIRST} to {LAST}"),
        ({"since": "2026-02-01", "until": "2026-02-01"}, "until: must be later than since"),
        ({"delivery_ids": [ID, "not-an-id"]}, "delivery_ids[1]: 'not-an-id' is not a delivery id"),
    ],
)  # fmt: skip
def test_each_invalid_filter_is_refused_naming_it(
    catalog: Catalog, filters: dict[str, object], message: str
) -> None:
    assert refusal(selection, catalog, **filters) == message


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is UTC+14 (a bare time must still be read as UTC)."""
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("far_from_utc")
def test_valid_filters_make_the_selection(catalog: Catalog) -> None:
    chosen = selection(
        catalog, notification_type="otp", channel="SMS", error_class="TRANSIENT",
        since="2026-11-29T12:00:00+01:00", until="2026-11-29T12:00:00",
        delivery_ids=[ID.upper()],
    )  # fmt: skip
    assert chosen == Selection(
        notification_type="otp", channel="SMS", error_class="TRANSIENT",
        since_ms=int(datetime(2026, 11, 29, 11, tzinfo=UTC).timestamp() * 1000),
        until_ms=int(datetime(2026, 11, 29, 12, tzinfo=UTC).timestamp() * 1000),  # UTC if bare
        delivery_ids=frozenset({ID}),
    )  # fmt: skip
    assert selection(catalog) == Selection()


def test_the_last_time_in_utc_is_a_valid_bound(catalog: Catalog) -> None:
    latest = selection(catalog, until="9999-12-31T23:59:59+14:00")
    assert latest.until_ms == int(datetime(9999, 12, 31, 9, 59, 59, tzinfo=UTC).timestamp() * 1000)


def test_a_replay_needs_a_printable_operator_and_reason(catalog: Catalog) -> None:
    body = ReplayBody(limit=5, operator="anna", reason="outage over")
    assert refusal(replay_order, catalog, msgspec.structs.replace(body, operator="   ")) == (
        "operator: printable text is required, not only blanks"
    )
    assert refusal(replay_order, catalog, msgspec.structs.replace(body, reason="ok\x1b[2J")) == (
        "reason: printable text is required, not only blanks"
    )
    assert refusal(replay_order, catalog, msgspec.structs.replace(body, channel="FAX")).startswith(
        "channel: "
    )


def test_a_valid_replay_body_is_the_order(catalog: Catalog) -> None:
    body = ReplayBody(limit=5, operator=" anna ", reason=" outage over ", type="otp",
                      dry_run=True, force=True)  # fmt: skip
    opt_out_types = frozenset(name for name, kind in catalog.types.items() if kind.opt_out)
    assert "otp" not in opt_out_types
    assert replay_order(catalog, body) == ReplayOrder(
        selection=Selection(notification_type="otp"), limit=5, operator="anna",
        reason="outage over", force=True, dry_run=True, opt_out_types=opt_out_types,
    )  # fmt: skip


def test_samples_are_a_count_from_0_to_the_most_shown() -> None:
    assert samples_count(None) == DEFAULT_SAMPLES
    assert [samples_count(value) for value in ("0", " 7 ", 100, MAX_SAMPLES)] == [0, 7, 100, 100]
    for bad in ("101", "-1", "ten", "", 1000):
        assert refusal(samples_count, bad) == "samples: must be an integer from 0 to 100"


def test_a_letter_shows_its_context_but_no_address_and_no_data_values() -> None:
    view = letter_view(LETTER)
    shown = msgspec.json.encode(view).decode()
    for secret in (ADDRESS, "jane@example.com", "424242", "Jane Doe"):
        assert secret not in shown
    assert view.data_keys == ["code", "name"]  # which variables, not their values
    assert view.last_error == "number <phone> of <email> does not exist"
    assert (view.recipient_id, view.locale, view.delivery_id, view.version) == ("r", "en", "d", 5)
    assert view.dead_lettered_at == datetime(2025, 11, 29, 12, tzinfo=UTC)
    assert view.first_attempt_at == datetime(2025, 11, 29, 11, 58, 20, tzinfo=UTC)
    assert view.other_fields == ["raw_unexpected"]
    assert view.resolution is None


def test_a_letter_without_a_work_item_or_times_shows_nothing_for_them() -> None:
    bare = DeadLetter(shard=1, entry_id="5-0", error_class="POISON", last_error="undecodable",
                      resolution=Resolution("replayed", "anna", "why", 0))  # fmt: skip
    view = letter_view(bare)
    assert (view.delivery_id, view.recipient_id, view.created_at, view.data_keys) == (
        None, None, None, [],
    )  # fmt: skip
    assert (view.first_attempt_at, view.last_attempt_at, view.version) == (None, None, None)
    assert view.resolution is not None
    assert (view.resolution.outcome, view.resolution.at) == ("replayed", None)


def test_a_summary_counts_most_first_and_masks_its_samples() -> None:
    summary = Summary(
        open=3, resolved=1, by_channel=Counter({"EMAIL": 1, "SMS": 2}),
        by_type=Counter({"otp": 3}), by_error_class=Counter({"PERMANENT": 3}),
        oldest_open_ms=1_764_417_600_000, samples=[LETTER],
    )  # fmt: skip
    view = summary_view(summary)
    assert list(view.by_channel.items()) == [("SMS", 2), ("EMAIL", 1)]
    assert view.oldest_open_at == datetime(2025, 11, 29, 12, tzinfo=UTC)
    assert ADDRESS not in msgspec.json.encode(view).decode()
    assert summary_view(Summary()).oldest_open_at is None


def test_a_replay_says_what_happened_to_each_entry() -> None:
    quiet_end = datetime(2025, 11, 30, 7, tzinfo=UTC)
    report = ReplayReport(
        dry_run=True,
        replayed=[ReplayResult(LETTER, "replayed"),
                  ReplayResult(LETTER, "replayed", deferred_until=quiet_end)],
        skipped=[ReplayResult(LETTER, "ttl_passed")],
    )  # fmt: skip
    order = ReplayOrder(selection=Selection(), limit=10, operator="anna", reason="outage over")
    view = replay_view(order, report)
    assert (view.dry_run, view.operator, view.reason) == (True, "anna", "outage over")
    now, later = view.replayed
    assert now.detail == "queued again, same delivery id"
    assert later.detail == (
        "queued again, same delivery id, once the recipient's quiet hours end at "
        "2025-11-30T07:00:00+00:00"
    )
    assert later.deferred_until == quiet_end
    [skipped] = view.skipped
    assert (skipped.outcome, skipped.detail) == ("ttl_passed", SKIP_REASONS["ttl_passed"])
