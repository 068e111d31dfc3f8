"""A circuit breaker for calls to the shared store (closed -> open -> half-open -> closed).

The clock is injected so the transitions can be tested without sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"  # calls go through
    OPEN = "open"  # calls are refused until ``reset_after_s`` has passed
    HALF_OPEN = "half_open"  # one trial call is in flight; its outcome decides


class CircuitBreaker:
    def __init__(
        self, failure_threshold: int, reset_after_s: float, clock: Callable[[], float]
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be >= 1")
        self._threshold = failure_threshold
        self._reset_after_s = reset_after_s
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self.opened_count = 0  # how many times the breaker tripped, for metrics

    @property
    def state(self) -> BreakerState:
        return self._state

    def ready(self) -> bool:
        """Whether ``allow()`` would admit a call now (without moving to half-open)."""
        if self._state is BreakerState.OPEN:
            return self._clock() - self._opened_at >= self._reset_after_s
        return self._state is BreakerState.CLOSED

    def allow(self) -> bool:
        """Whether a call may be attempted now. Moving to half-open admits exactly one trial."""
        if self._state is BreakerState.CLOSED:
            return True
        if self._state is BreakerState.OPEN and (
            self._clock() - self._opened_at >= self._reset_after_s
        ):
            self._state = BreakerState.HALF_OPEN
            return True
        return False

    def record_success(self) -> None:
        self._state = BreakerState.CLOSED
        self._failures = 0

    def record_failure(self) -> None:
        self._failures += 1
        if self._state is BreakerState.HALF_OPEN or self._failures >= self._threshold:
            self._trip()

    def _trip(self) -> None:
        self._state = BreakerState.OPEN
        self._opened_at = self._clock()
        self.opened_count += 1
