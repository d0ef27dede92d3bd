"""What a dead-letter entry holds, for each kind of entry, and how it is read back."""

from __future__ import annotations

from streams.core import codec
from streams.core.vocabulary import ErrorClass
from streams.dlq.entries import (
    DeadLetter,
    Resolution,
    Worker,
    failed_delivery_entry,
    parse_entry,
    parse_resolution,
    poison_entry,
    resolution_mark,
)
from tests.unit.delivery_examples import ITEM

WORKER = Worker("host-1", "1.2.3")


def stored(fields: dict[str, object]) -> dict[bytes, bytes]:
    """Fields as XRANGE returns them."""
    return {
        name.encode(): value if isinstance(value, bytes) else str(value).encode()
        for name, value in fields.items()
    }


def test_a_failed_delivery_entry_reads_back_with_its_whole_context() -> None:
    fields = failed_delivery_entry(
        ITEM,
        error_class=ErrorClass.TRANSIENT,
        error="503 from provider",
        attempts=4,
        first_attempt_ms=2_000,
        last_attempt_ms=9_000,
        worker=WORKER,
        version=7,
        work_entry_id="5-0",
    )
    letter = parse_entry(2, "1700000000123-0", stored(fields))
    assert letter == DeadLetter(
        shard=2, entry_id="1700000000123-0", error_class="TRANSIENT",
        last_error="503 from provider", delivery_id="d", notification_id="n",
        notification_type="otp", channel="SMS", priority="HIGH", attempts=4,
        first_attempt_ms=2_000, last_attempt_ms=9_000, worker="host-1", worker_version="1.2.3",
        version=7, work_entry_id="5-0", work=ITEM,
    )  # fmt: skip
    assert letter.dead_lettered_ms == 1_700_000_000_123


def test_a_poison_entry_keeps_the_work_entry_as_it_was() -> None:
    raw = {b"w": codec.encode(ITEM), b"unexpected": b"+4915112345678"}
    fields = poison_entry("3-0", raw, reason="delivered 6 times", worker=WORKER)
    assert fields["raw_w"] == codec.encode(ITEM)
    assert fields["raw_unexpected"] == b"+4915112345678"
    letter = parse_entry(0, "10-0", stored(fields))
    # What the work item says fills in what the entry itself does not.
    assert (letter.error_class, letter.last_error) == ("POISON", "delivered 6 times")
    assert (letter.delivery_id, letter.channel, letter.notification_type) == ("d", "SMS", "otp")
    assert letter.work == ITEM
    assert letter.version is None  # no delivery version was known
    # Other fields are named, never shown: a raw value may be an address.
    assert letter.other_fields == ("raw_unexpected",)


def test_a_poison_entry_without_a_readable_work_item_has_no_delivery() -> None:
    fields = poison_entry("3-0", {b"w": b"\x00garbage"}, reason="undecodable", worker=WORKER)
    letter = parse_entry(0, "10-0", stored(fields))
    assert letter.work is None
    assert (letter.delivery_id, letter.channel, letter.error_class) == ("", "", "POISON")


def test_an_unreadable_delayed_member_is_read_as_poison_with_its_reason() -> None:
    # What streams/delivery/schedule_due.lua writes: a reason and the member, nothing else.
    raw = {b"reason": b"unreadable delayed member", b"member": b"nonsense"}
    letter = parse_entry(1, "20-0", raw)
    assert (letter.error_class, letter.last_error) == ("POISON", "unreadable delayed member")
    assert (letter.delivery_id, letter.attempts, letter.work) == ("", 0, None)
    assert letter.other_fields == ("member",)


def test_numbers_that_are_not_numbers_read_as_nothing() -> None:
    letter = parse_entry(0, "1-0", {b"attempts": b"many", b"version": b"-1", b"last_error": b"x"})
    assert (letter.attempts, letter.version) == (0, None)


def test_a_resolution_mark_round_trips_and_a_broken_one_still_settles() -> None:
    mark = resolution_mark("replayed", "anna", "outage over", 1_700_000_000_000)
    assert parse_resolution(mark) == Resolution(
        "replayed", "anna", "outage over", 1_700_000_000_000
    )
    assert parse_resolution(mark.encode()) == parse_resolution(mark)
    assert parse_resolution(None) is None
    for broken in (b"not json", b"{}", b'{"outcome": "replayed"}', b"[1, 2]"):
        assert parse_resolution(broken) == Resolution("unknown", "", "", 0)
