"""When a notification's template data is shared instead of copied into every work item."""

from __future__ import annotations

from streams.work_items import DATA_KEY_OVERHEAD, share_data


def test_data_is_shared_once_its_copies_would_cost_more_than_a_key() -> None:
    assert not share_data(10_000, 1)  # one work item: one copy, nothing to share
    assert not share_data(DATA_KEY_OVERHEAD // 2, 3)  # two extra copies = one key's cost
    assert share_data(DATA_KEY_OVERHEAD // 2 + 1, 3)
    assert share_data(DATA_KEY_OVERHEAD + 1, 2)
