"""The relay's feed of routing's step clock (``routing.step_clock``): one tick per upstream read.

Every running sequence of a decoding engine gets one token a step, so each read of a streaming
answer is a step end seen half a round trip later. The relay hands each read's arrival time to
the router's clock (``UpstreamExchange.tick``, called by the pulled reader and the push sink),
on the monotonic clock routing decides on, so the candidates a decision returns carry the wait
for the engine's next step instead of half a step. A router without a clock feeds nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from routing.step_clock import StepClock


def step_ticker(router: object, backend: str) -> Callable[[float], None] | None:
    """What one read of ``backend``'s stream calls with its arrival time (None: no clock): the
    backend's own track, bound once (``StepClock.feed``), so a read costs one call, not a
    lookup through ``StepClock.seen`` as well (every relayed read runs it)."""
    clock = getattr(router, "step_clock", None)
    return clock.feed(backend) if isinstance(clock, StepClock) else None


def on_routing_clock(perf_at: float | None) -> float:
    """A ``time.perf_counter()`` instant (a stream's first token) on the monotonic clock routing
    decides on; now when None. The first token is a step end too, and the reads after it are
    a step apart from its arrival, not from when the relay got round to learning from it."""
    now = time.monotonic()
    return now if perf_at is None else now - (time.perf_counter() - perf_at)


def step_phase(router: object, backend: str, now: float) -> dict[str, float] | None:
    """What ``explain`` shows of the clock's part in the decision at ``now`` about ``backend``:
    the wait that replaced the half step (None: the half step stood). ``tick_at_s`` is on the
    gateway's monotonic clock (the host's), so a test can hold it against an engine's steps."""
    clock = getattr(router, "step_clock", None)
    phase = clock.told(backend, now) if isinstance(clock, StepClock) else None
    if phase is None:
        return None
    return {
        "wait_ms": round(phase.wait_ms, 3),
        "half_step_ms": round(phase.half_step_ms, 3),
        "period_ms": round(phase.period_ms, 3),
        "tick_age_ms": round(1000.0 * (now - phase.tick), 3),
        "tick_at_s": phase.tick,
    }
