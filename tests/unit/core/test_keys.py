"""Key names: sharding that never moves, and one hash tag per shard."""

from __future__ import annotations

import pytest

from streams.core.ids import new_id
from streams.core.keys import KeySpace, ShardKeys, ingest_routing, shard_from_id, shard_of
from streams.core.vocabulary import Priority


def hash_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes: between the first '{' and the next '}'."""
    start = key.find("{")
    end = key.find("}", start + 1)
    assert start != -1
    assert end > start + 1, key
    return key[start + 1 : end]


def test_shard_of_is_stable_across_processes() -> None:
    # CRC32 values computed once; a change here would move every key to another shard.
    assert shard_of("hello", 1024) == 646
    assert shard_of("user-42", 16) == 3
    assert shard_of(ingest_routing("orders", "order-1001"), 16) == 12


@pytest.mark.parametrize("shards", [1, 2, 7, 16, 1024])
def test_shard_of_stays_within_range(shards: int) -> None:
    for n in range(200):
        assert 0 <= shard_of(f"key-{n}", shards) < shards


def test_a_single_shard_takes_everything() -> None:
    assert {shard_of(f"key-{n}", 1) for n in range(50)} == {0}


def test_many_routing_strings_spread_over_the_shards() -> None:
    assert {shard_of(f"key-{n}", 8) for n in range(200)} == set(range(8))


def test_the_same_idempotency_key_from_two_producers_does_not_collide() -> None:
    space = KeySpace("clarion", 1)
    orders = space.for_ingest("orders", "k-1").idempotency("orders", "k-1")
    billing = space.for_ingest("billing", "k-1").idempotency("billing", "k-1")
    assert orders != billing
    assert "orders" in orders
    assert "billing" in billing


def test_for_ingest_routes_by_producer_and_key() -> None:
    space = KeySpace("clarion", 16)
    assert space.for_ingest("orders", "order-1001") == ShardKeys("clarion", 12)
    assert space.for_ingest("orders", "order-1001") == space.for_ingest("orders", "order-1001")


def test_every_key_of_a_shard_shares_its_hash_tag() -> None:
    shard = KeySpace("clarion", 8).shard(5)
    # User-chosen parts with braces must not change the slot.
    keys = [
        shard.events,
        shard.delayed,
        shard.dlq,
        *(shard.work(priority) for priority in Priority),
        shard.idempotency("orders", "{evil}"),
        shard.notification(new_id(5)),
        shard.delivery(new_id(5)),
        shard.recipient("{user}-42"),
        shard.campaign_cancelled(new_id(2)),
    ]
    assert {hash_tag(key) for key in keys} == {"s5"}
    assert all(key.startswith("clarion:{s5}:") for key in keys)
    assert len(set(keys)) == len(keys)


def test_each_priority_has_its_own_work_stream() -> None:
    shard = ShardKeys("t", 0)
    assert len({shard.work(priority) for priority in Priority}) == 3


def test_shards_have_different_tags() -> None:
    space = KeySpace("clarion", 4)
    assert [hash_tag(shard.events) for shard in space.all_shards()] == ["s0", "s1", "s2", "s3"]


def test_a_rate_bucket_has_a_tag_of_its_own() -> None:
    assert hash_tag(KeySpace("clarion", 4).rate_bucket("sandbox")) == "rl:sandbox"


def test_notification_shard_finds_the_issuing_shard() -> None:
    space = KeySpace("clarion", 16)
    assert space.notification_shard(new_id(11)) == space.shard(11)


def test_shard_from_id_of_garbage_is_zero() -> None:
    assert shard_from_id("not-an-id-xyz") == 0
