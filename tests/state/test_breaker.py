"""Circuit breaker transitions, on an injected clock."""

from __future__ import annotations

from gateway.state.breaker import BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def state_of(breaker: CircuitBreaker) -> BreakerState:
    # A call, not the property, so mypy does not narrow it across transitions.
    return breaker.state


def test_opens_after_consecutive_failures_and_recovers_through_half_open() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=2, reset_after_s=1.0, clock=clock)
    breaker.record_failure()
    assert state_of(breaker) is BreakerState.CLOSED and breaker.allow()
    breaker.record_failure()
    assert state_of(breaker) is BreakerState.OPEN
    assert not breaker.allow() and not breaker.ready()
    clock.now = 1.0
    assert breaker.ready()
    assert breaker.allow()  # the one trial
    assert state_of(breaker) is BreakerState.HALF_OPEN
    assert not breaker.allow()  # no second trial while the first is out
    breaker.record_success()
    assert state_of(breaker) is BreakerState.CLOSED and breaker.allow()


def test_failed_trial_reopens_for_another_full_period() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, reset_after_s=1.0, clock=clock)
    for _ in range(3):
        breaker.record_failure()
    clock.now = 1.5
    assert breaker.allow()
    breaker.record_failure()  # a single failure in half-open is enough
    assert state_of(breaker) is BreakerState.OPEN
    clock.now = 2.0
    assert not breaker.allow()
    clock.now = 2.5
    assert breaker.allow()
    assert breaker.opened_count == 2


def test_success_resets_the_failure_count() -> None:
    breaker = CircuitBreaker(failure_threshold=2, reset_after_s=1.0, clock=Clock())
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert state_of(breaker) is BreakerState.CLOSED
