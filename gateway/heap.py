"""The cyclic garbage collector, set for a long-running server once the gateway has started.

A started gateway holds ~90,000 tracked objects that live as long as the process (modules,
pydantic models, the config, routing tables, prometheus metrics). Every full collection walks
all of them: measured at ~70 ms of CPU on this 2-core VM, one pause every ~1,500 requests that
stalls every stream in flight. :func:`settle_after_start` collects once and then freezes what
is left (``gc.freeze``, CPython's permanent generation): later collections skip those objects,
so a full collection walks only what requests allocated since. The young generation's
threshold is raised from 700 to :data:`YOUNG_THRESHOLD` allocations so that collections of
short-lived request objects (most die by reference count before any collection sees them) run
an order of magnitude less often.

A request's own objects form no cycle (the stream and its hold, the upstream response and its
parser, the read watch and its exchange, a refusal and its traceback are let go where the
request ends), so reference counting frees each request whole and the collector, at this
threshold, hardly runs under load: ``tests/reliability/test_no_cyclic_garbage.py`` holds that.
Before, each request left ~60 objects for it, and at c=32 a young collection (~5 ms) every
~0.5 s and a middle one (~23 ms) every ~5 s stopped every stream (perf-issue16.md, session 19).

What this costs: an object frozen at start that later becomes part of an unreachable cycle is
never collected (reference counting still frees everything acyclic). What starts with the
gateway and is dropped later is the first configuration's state after a reload: once, bounded.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # CPython's default is 700


def settle_after_start() -> int:
    """Collect, freeze the survivors, raise the young threshold; returns the objects frozen."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    return gc.get_freeze_count()
