"""gateway/heap.py: what start-up built is frozen out of the collector's walks."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.heap import YOUNG_THRESHOLD, settle_after_start


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector can free it


@pytest.mark.usefixtures("restored_gc")
def test_start_up_objects_are_frozen_and_young_collections_are_rarer() -> None:
    before = gc.get_threshold()
    kept = [_Node() for _ in range(100)]
    frozen = settle_after_start()
    assert frozen == gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, before[1], before[2])
    # What start-up left is no longer in any generation a collection walks.
    walked = {id(o) for o in gc.get_objects()}
    assert not any(id(node) in walked for node in kept)
    del kept
    later = _Node()
    del later
    assert gc.collect() >= 1  # the cycle made after the freeze is still collected
