"""Events and work items as bytes: work items that stay readable, and event arrays joined
into one ``events`` entry that a Lua script can cut apart again."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from streams.core import codec
from streams.core.events import DeliveryFailed
from streams.delivery.work_items import WorkItem
from tests.unit.event_examples import AT, DELIVERY, DID, EXAMPLES, NID


def work_item(**changes: Any) -> WorkItem:
    fields: dict[str, Any] = {
        "delivery_id": DID,
        "notification_id": NID,
        "notification_type": "order_confirmed",
        "channel": "EMAIL",
        "priority": "NORMAL",
        "recipient_id": "user-42",
        "address": "jane@example.com",
        "locale": "en",
        "data": {"order_id": "1001", "items": [{"sku": "A", "qty": 2}], "gift": None},
        "created_ms": 1768469400125,
        "expires_ms": 1768642200125,
    }
    return WorkItem(**(fields | changes))


def test_a_work_item_round_trips() -> None:
    item = work_item(attempts=2)
    decoded = codec.decode_work_item(codec.encode(item))
    assert decoded == item
    assert decoded.data["items"] == [{"sku": "A", "qty": 2}]


WORK_FIELDS = list(WorkItem.__struct_fields__)


def test_work_items_written_before_later_fields_existed_still_decode() -> None:
    # Work items are arrays in field order: fields added later come last, with defaults.
    everything = json.loads(codec.encode(work_item()))
    assert WORK_FIELDS[-13:] == [
        "attempts", "producer", "shared_data", "failover", "campaign", "trace", "await_until_ms",
        "send_at_ms", "step", "unless", "watch", "watched", "fallback",
    ]  # fmt: skip
    before_steps = codec.decode_work_item(json.dumps(everything[:-5]))
    assert (before_steps.step, before_steps.unless, before_steps.watch) == (0, [], [])
    assert (before_steps.watched, before_steps.fallback) == (False, [])
    stored = everything[:-5]
    before_attempts = codec.decode_work_item(json.dumps(stored[:-7]))
    assert (before_attempts.attempts, before_attempts.producer) == (0, "")
    assert not codec.decode_work_item(json.dumps(stored[:-5])).shared_data
    assert codec.decode_work_item(json.dumps(stored[:-4])).failover == 0
    assert codec.decode_work_item(json.dumps(stored[:-3])).campaign == ""
    assert codec.decode_work_item(json.dumps(stored[:-2])).trace == ""
    assert codec.decode_work_item(json.dumps(stored[:-1])).await_until_ms == 0


def test_a_work_item_waiting_for_an_address_keeps_its_bound_and_an_empty_trace() -> None:
    item = msgspec.structs.replace(work_item(), address="", await_until_ms=1_700_000_060_000)
    encoded = codec.encode_work_item(item)
    assert encoded.endswith(b',"",1700000060000]')
    assert codec.decode_work_item(encoded) == item
    later = msgspec.structs.replace(item, send_at_ms=1_700_000_030_000)
    encoded = codec.encode_work_item(later)
    assert encoded.endswith(b',"",1700000060000,1700000030000]')
    assert codec.decode_work_item(encoded) == later
    plain = codec.encode_work_item(work_item())
    assert json.loads(plain)[-1] == ""  # the campaign: neither trace nor bound written
    assert codec.decode_work_item(plain) == work_item()


def test_a_work_item_with_a_bad_channel_is_refused() -> None:
    stored = json.loads(codec.encode(work_item()))
    stored[WORK_FIELDS.index("channel")] = "FAX"
    with pytest.raises(msgspec.ValidationError):
        codec.decode_work_item(json.dumps(stored))


def test_joined_event_arrays_decode_as_one_and_cut_back_into_each() -> None:
    sent, failed, queued = EXAMPLES[0], EXAMPLES[1], EXAMPLES[2]
    arrays = [codec.encode_events([sent]), b"", codec.encode_events([failed, queued]), b"[]"]
    joined, spans = codec.join_events(arrays)
    assert codec.decode_events(joined) == [sent, failed, queued]
    # What a Lua script's string.sub(joined, first, last) cuts out, wrapped in brackets.
    cut = [b"[" + joined[first - 1 : last] + b"]" for first, last in spans]
    assert cut == [arrays[0], b"[]", arrays[2], b"[]"]
    assert codec.join_events([]) == (b"[]", [])
    # The scripts take the spans as one string of numbers, two per array.
    text = codec.span_text(spans).decode()
    assert [int(number) for number in text.split(" ")] == [n for span in spans for n in span]


def test_spans_count_bytes_not_characters() -> None:
    # Error texts may hold any character: the scripts cut by byte, so the spans must too.
    failed = DeliveryFailed(
        at=AT, **DELIVERY, attempts=1, error_class="PERMANENT", error="Empfänger unbekannt: €"
    )
    arrays = [codec.encode_events([failed]), codec.encode_events([EXAMPLES[1], failed])]
    joined, spans = codec.join_events(arrays)
    assert [b"[" + joined[first - 1 : last] + b"]" for first, last in spans] == arrays
    assert codec.decode_events(joined) == [failed, EXAMPLES[1], failed]


def test_arrays_without_events_join_into_an_empty_array() -> None:
    joined, spans = codec.join_events([b"", b"[]", b""])
    assert joined == b"[]"
    assert spans == [(1, 0), (1, 0), (1, 0)]
    assert codec.span_text(spans) == b"1 0 1 0 1 0"
    assert codec.decode_events(joined) == []


def test_what_is_not_an_events_entry_is_refused() -> None:
    with pytest.raises(msgspec.ValidationError):
        codec.decode_events(codec.encode(EXAMPLES[1]))  # one event, not an array of them
    with pytest.raises(msgspec.DecodeError):
        codec.decode_events(b"[{")
    with pytest.raises(msgspec.DecodeError):
        codec.decode_work_item(b"not json")


def test_as_text_reads_bytes_and_strings_alike() -> None:
    assert codec.as_text(b"work:high") == "work:high"
    assert codec.as_text("work:high") == "work:high"
    assert codec.as_text("é".encode()) == "é"
