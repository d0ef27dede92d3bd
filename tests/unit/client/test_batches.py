"""Cutting a list into batch requests: keys derived from the base key and the position,
parts of at most the server's limit, and items answered 409 or 503 sent again alone."""

from __future__ import annotations

import msgspec
import pytest

from clarion_client.batches import (
    BATCH_LIMIT,
    UPLOAD_LIMIT,
    PartProgress,
    keyed_items,
    parts,
    upload_parts,
)
from clarion_client.errors import ServerError
from clarion_client.models import BatchItem, BatchResult, Notification, Recipient

OTP = Notification(recipient=Recipient(id="u-1", phone="+4915112345678"), type="otp")


def otp(position: int) -> Notification:
    return Notification(recipient=Recipient(id=f"u-{position}"), type="otp")


def test_each_item_gets_the_base_key_and_its_position_unless_it_has_its_own() -> None:
    own = BatchItem(recipient=Recipient(id="u-9"), type="otp", idempotency_key="mine")
    items = keyed_items([otp(0), own, otp(2)], "orders-17")
    assert [item.idempotency_key for item in items] == ["orders-17:0", "mine", "orders-17:2"]
    assert items[0].recipient == Recipient(id="u-0")
    assert items[1] is own


def test_the_same_call_derives_the_same_keys() -> None:
    notifications = [otp(i) for i in range(5)]
    assert keyed_items(notifications, "k") == keyed_items(notifications, "k")


def test_parts_keep_the_order_and_hold_at_most_the_limit() -> None:
    items = keyed_items([otp(i) for i in range(2500)], "k")
    cut = parts(items)
    assert [len(part) for part in cut] == [BATCH_LIMIT, BATCH_LIMIT, 500]
    assert [item for part in cut for item in part] == items
    assert parts(items[:BATCH_LIMIT]) == [items[:BATCH_LIMIT]]
    assert parts([]) == []


def result(key: str, status: int) -> BatchResult:
    return BatchResult(idempotency_key=key, status_code=status, detail=None)


def test_items_answered_409_or_503_are_sent_again_alone() -> None:
    items = keyed_items([otp(i) for i in range(4)], "k")
    progress = PartProgress(items)
    first = msgspec.json.decode(progress.body())
    assert [n["idempotency_key"] for n in first["notifications"]] == ["k:0", "k:1", "k:2", "k:3"]
    progress.record([result("k:0", 202), result("k:1", 409), result("k:2", 422),
                     result("k:3", 503)])  # fmt: skip
    assert not progress.settled
    again = msgspec.json.decode(progress.body())
    assert [n["idempotency_key"] for n in again["notifications"]] == ["k:1", "k:3"]
    progress.record([result("k:1", 202), result("k:3", 202)])
    assert progress.settled
    assert [(r.idempotency_key, r.status_code) for r in progress.results()] == [
        ("k:0", 202), ("k:1", 202), ("k:2", 422), ("k:3", 202),
    ]  # fmt: skip


def test_when_retries_run_out_the_last_answers_stand() -> None:
    progress = PartProgress(keyed_items([otp(0)], "k"))
    progress.record([result("k:0", 503)])
    assert [r.status_code for r in progress.results()] == [503]


def test_an_answer_with_the_wrong_number_of_results_is_refused() -> None:
    progress = PartProgress(keyed_items([otp(0), otp(1)], "k"))
    with pytest.raises(ServerError, match="the batch answer has 1 results for 2 items"):
        progress.record([result("k:0", 202)])
    with pytest.raises(ValueError, match="no result yet for the items with keys"):
        progress.results()


def test_unset_fields_are_left_out_so_the_server_applies_its_defaults() -> None:
    [item] = keyed_items([OTP], "k")
    assert msgspec.json.decode(msgspec.json.encode(item)) == {
        "recipient": {"id": "u-1", "phone": "+4915112345678"},
        "type": "otp",
        "idempotency_key": "k:0",
    }


def test_an_upload_is_cut_at_the_limit_with_a_key_per_part() -> None:
    recipients = [f"user-{i}" for i in range(UPLOAD_LIMIT + 1)]
    [(first_key, first), (second_key, second)] = upload_parts(recipients, "spring")
    assert (first_key, second_key) == ("spring:0", "spring:1")
    assert (first, second) == (recipients[:UPLOAD_LIMIT], recipients[UPLOAD_LIMIT:])
    assert upload_parts(["u-1"], "k") == [("k:0", ["u-1"])]
