"""Time-ordered ids that carry their shard."""

from __future__ import annotations

import uuid

import pytest

from streams.core.ids import MAX_SHARDS, is_uuid, new_id, new_ids
from streams.core.keys import shard_from_id


def test_a_new_id_is_a_uuid_version_7() -> None:
    value = new_id(3)
    parsed = uuid.UUID(value)
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert str(parsed) == value
    assert is_uuid(value)


def test_ids_made_together_are_all_well_formed_and_distinct() -> None:
    ids = new_ids(7, 200, now_ms=1_780_347_600_000)
    assert len(set(ids)) == 200
    for value in ids:
        parsed = uuid.UUID(value)
        assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
        assert str(parsed) == value
        assert parsed.int & 0xFFFF == 7


def test_a_new_id_carries_its_creation_time() -> None:
    now_ms = 1_780_347_600_123
    assert uuid.UUID(new_id(0, now_ms=now_ms)).int >> 80 == now_ms


def test_ids_sort_by_creation_time() -> None:
    ids = [new_id(shard, now_ms=1_780_347_600_000 + step) for step, shard in enumerate([9, 0, 5])]
    later = [new_id(0, now_ms=1_780_347_600_000 + 1000 * step) for step in range(1, 50)]
    assert sorted(ids) == ids
    assert sorted(later) == later
    assert ids[-1] < later[0]


def test_ids_are_unique() -> None:
    assert len({new_id(1, now_ms=1_780_347_600_000) for _ in range(1000)}) == 1000


@pytest.mark.parametrize("shard", [0, 1, 15, 255, 1023, MAX_SHARDS - 1])
def test_the_shard_can_be_read_back_from_an_id(shard: int) -> None:
    assert shard_from_id(new_id(shard)) == shard


@pytest.mark.parametrize("shard", [-1, MAX_SHARDS])
def test_a_shard_out_of_range_is_refused(shard: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        new_id(shard)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("019bc123-4567-7abc-8def-0123456789ab", True),
        ("019BC123-4567-7ABC-8DEF-0123456789AB", True),
        ("019bc1234567-7abc-8def-0123456789ab", False),
        ("019bc12345677abc8def0123456789ab", False),
        ("{019bc123-4567-7abc-8def-0123456789a}", False),
        ("019bc123-4567-7abc-8def-0123456789zz", False),
        ("", False),
    ],
)
def test_is_uuid(text: str, expected: bool) -> None:
    assert is_uuid(text) is expected
