"""The cyclic garbage collector during one simulated run.

A run allocates millions of short-lived objects (decisions, events, samples) over a heap that
outlives it (the scenario, the fleet, every router's tables and prefix index). With CPython's
default thresholds, ``meridian sim loadtests/scenarios/speed-100-backends.yaml --requests
100000`` made 667 young, 60 middle and 5 full collections, 2.3 s of its 84 s of CPU (timed with
``gc.callbacks``), the older ones walking the whole long-lived heap each time. So for the run the heap that exists at its start is frozen
(``gc.freeze``: collections skip it) and the young threshold is raised, as the gateway does
after start (``gateway/heap.py``); both are put back when the run ends. The results do not
depend on when the collector runs: nothing in the simulator has a finalizer or reads ids.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

RUN_YOUNG_THRESHOLD = 10_000  # CPython's default is 700


@contextlib.contextmanager
def collector_for_a_run() -> Iterator[None]:
    """Freeze what exists now and collect the young generation less often, until the end."""
    threshold = gc.get_threshold()
    frozen_before = gc.get_freeze_count() > 0  # a caller's freeze (bench/cli.py) is left alone
    gc.freeze()
    gc.set_threshold(RUN_YOUNG_THRESHOLD, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if not frozen_before:
            gc.unfreeze()
