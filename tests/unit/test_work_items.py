"""When a notification's template data is shared instead of copied into every work item, and
work items encoded by earlier versions that must stay readable."""

from __future__ import annotations

import msgspec

from streams import codec
from streams.work_items import DATA_KEY_OVERHEAD, share_data

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
