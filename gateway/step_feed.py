"""The relay's feed of routing's step clock (``routing.step_clock``): one tick per upstream read.

Every running sequence of a decoding engine gets one token a step, so each read of a streaming
answer is a step end seen half a round trip later. The relay hands each read's arrival time to
the router's clock (``UpstreamExchange.tick``, called by the pulled reader and the push sink),
on the monotonic clock routing decides on, so the candidates a decision returns carry the wait
for the engine's next step instead of half a step. A router without a clock feeds nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from routing.step_clock import StepClock


def step_ticker(router: object, backend: str) -> Callable[[float], None] | None:
    """What one read of ``backend``'s stream calls with its arrival time (None: no clock)."""
    clock = getattr(router, "step_clock", None)
    return partial(clock.seen, backend) if isinstance(clock, StepClock) else None
