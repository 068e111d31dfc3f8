"""The request lifecycle table: every (state, event) pair, and every path's resources."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from gateway.lifecycle.states import (
    HOLDS,
    TERMINAL,
    TRANSITIONS,
    Event,
    InvalidTransition,
    Lifecycle,
    Resource,
    State,
    Transition,
)

# A path to each state from ACCEPTED, so any state can be the start of a pair.
_PATHS: dict[State, list[Event]] = {
    State.ACCEPTED: [],
    State.ADMITTED: [Event.ADMITTED],
    State.ROUTING: [Event.ADMITTED, Event.ROUTED],
    State.AWAITING_FIRST_TOKEN: [Event.ADMITTED, Event.ROUTED, Event.ATTEMPT_STARTED],
    State.STREAMING: [Event.ADMITTED, Event.ROUTED, Event.ATTEMPT_STARTED, Event.FIRST_TOKEN],
    State.DONE: [
        *[Event.ADMITTED, Event.ROUTED, Event.ATTEMPT_STARTED, Event.FIRST_TOKEN],
        Event.COMPLETED,
    ],
    State.FAILED: [Event.REFUSED],
    State.CANCELLED: [Event.CLIENT_GONE],
}


def _at(state: State) -> Lifecycle:
    lifecycle = Lifecycle()
    for event in _PATHS[state]:
        assert isinstance(lifecycle.handle(event), Transition)
    assert lifecycle.state is state
    return lifecycle


@given(st.sampled_from(State), st.sampled_from(Event))
def test_every_state_event_pair_is_a_transition_or_an_error_value(
    state: State, event: Event
) -> None:
    lifecycle = _at(state)
    live = lifecycle.live_attempts
    result = lifecycle.handle(event)
    expected = TRANSITIONS.get((state, event))
    if isinstance(result, InvalidTransition):
        assert lifecycle.state is state and lifecycle.live_attempts == live  # untouched
        assert result.state is state and result.event is event and result.message()
        # Only table gaps, or the attempt guards, refuse.
        assert expected is None or event in (Event.ATTEMPT_FAILED, Event.ALL_ATTEMPTS_FAILED)
        return
    assert expected is not None and result.after is expected is lifecycle.state
    assert result.acquire == HOLDS[expected] - HOLDS[state]
    assert result.release == HOLDS[state] - HOLDS[expected]


def test_terminal_states_accept_nothing_and_hold_nothing() -> None:
    for state in TERMINAL:
        assert HOLDS[state] == frozenset()
        assert all((state, event) not in TRANSITIONS for event in Event)


def test_every_live_state_can_be_cancelled_drained_or_timed_out() -> None:
    for state in set(State) - TERMINAL:
        for event, ending in (
            (Event.CLIENT_GONE, State.CANCELLED),
            (Event.DRAINED, State.CANCELLED),
            (Event.DEADLINE, State.FAILED),
        ):
            result = _at(state).handle(event)
            assert isinstance(result, Transition) and result.after is ending
            assert result.release == HOLDS[state] and result.acquire == frozenset()


def test_a_queued_request_holds_no_backend_reservation() -> None:
    """Admission before routing: waiting for a slot reserves nothing on any backend."""
    for state in (State.ACCEPTED, State.ADMITTED):
        assert Resource.ROUTER_RESERVATION not in HOLDS[state]
        assert Resource.HUB_IN_FLIGHT not in HOLDS[state]


@given(st.lists(st.sampled_from(Event), max_size=40))
def test_any_event_sequence_keeps_every_resource_balanced(events: list[Event]) -> None:
    """Apply what each transition says (an invalid event changes nothing): the ledger always
    equals what the current state holds, so a terminal state has released everything."""
    lifecycle = Lifecycle()
    ledger = Counter(HOLDS[State.ACCEPTED])  # acquired on acceptance
    for event in events:
        result = lifecycle.handle(event)
        if isinstance(result, InvalidTransition):
            continue
        ledger.update(result.acquire)
        ledger.subtract(result.release)
        assert all(count in (0, 1) for count in ledger.values()), ledger
        assert {r for r, n in ledger.items() if n} == lifecycle.holds
    if lifecycle.state in TERMINAL:
        assert all(count == 0 for count in ledger.values())


@given(st.integers(1, 4), st.integers(0, 4))
def test_attempts_and_hedges_stay_inside_awaiting_until_none_is_live(
    started: int, failed: int
) -> None:
    lifecycle = _at(State.ROUTING)
    for _ in range(started):
        assert isinstance(lifecycle.handle(Event.ATTEMPT_STARTED), Transition)
    for number in range(failed):
        result = lifecycle.handle(Event.ATTEMPT_FAILED)
        assert isinstance(result, Transition) == (number < started)
    assert lifecycle.state is State.AWAITING_FIRST_TOKEN
    live = max(0, started - failed)
    assert lifecycle.live_attempts == live
    final = lifecycle.handle(Event.ALL_ATTEMPTS_FAILED)
    assert isinstance(final, Transition) == (live == 0)
