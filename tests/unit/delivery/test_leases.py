"""A delivery's lease as a worker holds it: the verdicts the lease script answers, and the
template data the lease resolves."""

from __future__ import annotations

import re

import msgspec

from streams.core.keys import KeySpace
from streams.delivery.leases import (
    UNSENT,
    VERDICT_OF_REPLY,
    Lease,
    LeasedDelivery,
    LeaseVerdict,
    lease_of_reply,
)
from streams.dlq.entries import Worker
from tests.conftest import REPO
from tests.unit.delivery_examples import ITEM

SHARD = KeySpace("t").shard(0)


def test_every_verdict_the_lease_script_answers_is_named_and_nothing_else() -> None:
    script = (REPO / "streams" / "delivery" / "begin.lua").read_text()
    answered = set(re.findall(r'verdict = "([A-Z]+)"', script))
    answered.add(re.search(r'local verdict, [^=]+= "([A-Z]+)"', script)[1])  # type: ignore[index]
    assert answered == {verdict.value for verdict in LeaseVerdict}
    assert {reply.decode() for reply in VERDICT_OF_REPLY} == answered
    assert all(VERDICT_OF_REPLY[verdict.encode()] is verdict for verdict in LeaseVerdict)


def test_only_a_lease_that_is_ours_and_says_not_to_send_is_unsent() -> None:
    assert {LeaseVerdict.GO, LeaseVerdict.LEASED}.isdisjoint(UNSENT)
    assert len(UNSENT) == len(LeaseVerdict) - 2


def lease(shared_data: bytes = b"") -> Lease:
    return Lease(LeaseVerdict.GO, 2, 0, 5_000, 0, shared_data)


def test_a_delivery_with_shared_data_takes_what_the_lease_read() -> None:
    item = msgspec.structs.replace(ITEM, shared_data=True, data=None)
    held = LeasedDelivery.taken(SHARD, item, "1-0", lease(b'{"code":"7"}'), Worker("w", "1"))
    assert held.data == {"code": "7"}
    kept = held.self_contained_item()  # what a dead letter keeps: no shared data needed
    assert (kept.shared_data, kept.data) == (False, {"code": "7"})
    gone = LeasedDelivery.taken(SHARD, item, "1-0", lease(), Worker("w", "1"))
    assert gone.data is None


def test_a_delivery_with_its_own_data_keeps_it() -> None:
    item = msgspec.structs.replace(ITEM, data={"code": "1"})
    held = LeasedDelivery.taken(SHARD, item, "1-0", lease(), Worker("w", "1"))
    assert held.data == {"code": "1"}
    assert held.self_contained_item() is item
    assert held.priority is item.priority


def test_a_cancelled_lease_says_who_cancelled_and_carries_no_data() -> None:
    reply = (b"CANCELLED", b"3", b"1", b"1000", b"900")
    assert lease_of_reply((*reply, b"shop")) == Lease(
        LeaseVerdict.CANCELLED, 3, 1, 1000, 900, shared_data=b"", cancelled_by="shop"
    )
    # A marker set before it named anyone.
    assert lease_of_reply((*reply, b"1")).cancelled_by == ""
    go = lease_of_reply((b"GO", b"3", b"1", b"1000", b"900", b'{"a":1}'))
    assert (go.shared_data, go.cancelled_by) == (b'{"a":1}', "")
