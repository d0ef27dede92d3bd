"""The collector settings every Clarion process applies once it has started."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from app.processes.gc_tuning import YOUNG_THRESHOLD, tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_gc")
def test_loaded_objects_are_frozen_and_young_collections_wait_longer() -> None:
    gc.unfreeze()
    _, middle, old = gc.get_threshold()
    tune_gc()
    assert gc.get_freeze_count() > 1000  # the modules, classes and functions loaded so far
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)


@pytest.mark.usefixtures("restored_gc")
def test_reference_cycles_are_still_collected_without_asking() -> None:
    tune_gc()
    gc.collect()  # an empty young generation to start from
    collected: list[str] = []

    class Node:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            collected.append("node")

    Node()  # unreachable, but kept alive by its own reference
    assert collected == []
    alive = [[] for _ in range(YOUNG_THRESHOLD)]  # enough new objects to start a collection
    assert collected == ["node"]
    assert len(alive) == YOUNG_THRESHOLD
