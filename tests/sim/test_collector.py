"""The collector settings a simulated run takes are the process's own again after it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from loadtests.sim.collector import RUN_YOUNG_THRESHOLD, collector_for_a_run


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    yield
    gc.set_threshold(*threshold)
    if not frozen:
        gc.unfreeze()


def test_a_run_freezes_and_raises_the_young_threshold_then_puts_both_back() -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    with collector_for_a_run():
        assert gc.get_threshold() == (RUN_YOUNG_THRESHOLD, 10, 10)
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_freeze_made_before_the_run_stays() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    with collector_for_a_run():
        pass
    assert gc.get_freeze_count() >= frozen > 0


def test_settings_are_put_back_when_the_run_fails() -> None:
    gc.unfreeze()
    threshold = gc.get_threshold()
    with pytest.raises(RuntimeError), collector_for_a_run():
        raise RuntimeError("a handler failed")
    assert gc.get_threshold() == threshold
    assert gc.get_freeze_count() == 0
