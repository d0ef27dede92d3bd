"""One notification's deliveries at ingest: whose work items they are, when they share the
template data, and which dead addresses suppress them (the fates themselves are exercised
through the planner in ``test_fanout``); the answer and the record that list them."""

from __future__ import annotations

import msgspec

from app.ingest.fanout import Planner
from streams.core import codec
from streams.core.records import decode_record
from streams.recipients.read import RecipientSettings
from tests.conftest import DIGEST
from tests.unit.ingest.test_fanout import deliveries, fates, order, plan, planner, request

__all__ = ["planner"]  # the fixture, imported to be used here

NOTE = "n" * 300


def test_work_items_name_their_producer(planner: Planner) -> None:
    item = plan(planner, order(email="a@example.com"))
    assert {work.producer for _, _, work in deliveries(item) if work} == {"orders"}


def test_large_data_of_several_deliveries_is_shared_once(planner: Planner) -> None:
    big = request("order_confirmed", {"order_id": "1", "note": NOTE}, email="a@example.com")
    item = plan(planner, big)
    assert msgspec.json.decode(item.shared_data) == {"order_id": "1", "note": NOTE}
    work = [w for _, _, w in deliveries(item) if w]
    assert len(work) == 2  # EMAIL and IN_APP; PUSH has no token
    assert all(w.shared_data and w.data == {} for w in work)
    assert item.expires_ms == codec.decode_work_item(item.work[0].item).expires_ms


def test_a_single_delivery_carries_its_data_itself(planner: Planner) -> None:
    otp = request("otp", {"code": "1", "note": NOTE}, phone="+4915112345678")
    item = plan(planner, otp)
    assert item.shared_data == b""
    [(_, _, work)] = deliveries(item)
    assert work is not None
    assert work.data["note"] == NOTE


def test_a_dead_address_is_found_by_its_keyed_digest(planner: Planner) -> None:
    dead = RecipientSettings(invalid=frozenset({("EMAIL", DIGEST("a@example.com"))}))
    item = plan(planner, order(email="a@example.com"), dead)
    assert fates(item)[0] == ("EMAIL", "SUPPRESSED", "invalid_address")
    other_key = RecipientSettings(invalid=frozenset({("EMAIL", "0" * 32)}))
    assert fates(plan(planner, order(email="a@example.com"), other_key))[0][1] == "QUEUED"


def test_the_answer_and_the_record_list_the_same_deliveries(planner: Planner) -> None:
    item = plan(planner, order(email="a@example.com"))
    stored = decode_record(item.record)
    answer = msgspec.json.decode(item.response)
    assert answer["id"] == stored.id == item.notification_id
    assert [d["id"] for d in answer["deliveries"]] == [d.id for d in stored.deliveries]
    assert (stored.producer, stored.recipient_id, stored.type) == (
        "orders", "user-42", "order_confirmed",
    )  # fmt: skip
