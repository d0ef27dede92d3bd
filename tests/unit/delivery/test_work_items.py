"""When a notification's template data is shared instead of copied into every work item, and
work items encoded by earlier versions that must stay readable."""

from __future__ import annotations

import msgspec

from streams.core import codec
from streams.delivery.work_items import DATA_KEY_OVERHEAD, share_data

# A work item as encoded before items named their campaign (fields are only appended).
BEFORE_CAMPAIGNS = (
    b'["d-1","n-1","order_confirmed","EMAIL","NORMAL","user-42","anna@example.com","en",'
    b'{"order_id":"A-1"},1780000000000,1780003600000,0,"orders",false,0]'
)


def test_data_is_shared_once_its_copies_would_cost_more_than_a_key() -> None:
    assert not share_data(10_000, 1)  # one work item: one copy, nothing to share
    assert not share_data(DATA_KEY_OVERHEAD // 2, 3)  # two extra copies = one key's cost
    assert share_data(DATA_KEY_OVERHEAD // 2 + 1, 3)
    assert share_data(DATA_KEY_OVERHEAD + 1, 2)


def test_a_work_item_carries_its_campaign() -> None:
    old = codec.decode_work_item(BEFORE_CAMPAIGNS)
    item = msgspec.structs.replace(old, campaign="019bc123-4567-7abc-8def-0123456789c1")
    assert codec.decode_work_item(codec.encode(item)) == item
    assert codec.encode(item).startswith(BEFORE_CAMPAIGNS[:-1])  # the field is appended


def test_a_work_item_encoded_before_campaigns_still_decodes() -> None:
    item = codec.decode_work_item(BEFORE_CAMPAIGNS)
    assert (item.delivery_id, item.producer, item.data) == ("d-1", "orders", {"order_id": "A-1"})
    assert item.campaign == ""


# The same item as encoded before items carried a trace.
BEFORE_TRACES = BEFORE_CAMPAIGNS[:-1] + b',""]'
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_an_item_without_a_trace_is_written_byte_for_byte_as_before() -> None:
    """msgspec omits no default of an array-like struct, trailing ones included (checked for
    0.22: ``omit_defaults=True`` changes nothing there), so ``encode_work_item`` drops the
    empty trace itself: a deployment without tracing writes the items it wrote before."""
    old = codec.decode_work_item(BEFORE_TRACES)
    assert old.trace == ""
    assert codec.encode_work_item(old) == BEFORE_TRACES
    # What msgspec alone writes: the empty trace, no wait for an address (0), no send time
    # (0) and no step or fallback as well.
    assert codec.encode(old) == BEFORE_TRACES[:-1] + b',"",0,0,0,[],[],false,[]]'

    class Trimmed(msgspec.Struct, array_like=True, omit_defaults=True):
        kept: int
        trailing: str = ""

    assert msgspec.json.encode(Trimmed(1)) == b'[1,""]'


def test_a_traced_item_keeps_its_trace_when_it_is_queued_again() -> None:
    item = msgspec.structs.replace(codec.decode_work_item(BEFORE_TRACES), trace=TRACEPARENT)
    encoded = codec.encode_work_item(item)
    assert encoded == BEFORE_TRACES[:-1] + b',"' + TRACEPARENT.encode() + b'"]'
    assert codec.decode_work_item(encoded) == item
    retried = msgspec.structs.replace(item, attempts=1, failover=1)  # as a retry re-queues it
    assert codec.decode_work_item(codec.encode_work_item(retried)).trace == TRACEPARENT


def test_an_item_with_a_trace_is_read_by_a_worker_that_knows_none() -> None:
    """During an upgrade an older worker reads items written by a newer API: msgspec ignores
    the trailing field it does not know."""

    class Earlier(msgspec.Struct, array_like=True):
        delivery_id: str
        notification_id: str

    earlier = msgspec.json.decode(b'["d-1","n-1","' + TRACEPARENT.encode() + b'"]', type=Earlier)
    assert earlier == Earlier("d-1", "n-1")
