"""routing.awaiting: a backend that owes a first token longer than any waiting request's due
time is overdue by the excess, until a first token comes; counts never go below zero."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.awaiting import AwaitingFirstToken, OverdueParams


def _awaiting() -> AwaitingFirstToken:
    return AwaitingFirstToken(OverdueParams(factor=2.0, after_ms=50.0))  # due: 2 x TTFT + 50


def test_a_silent_backend_is_overdue_by_the_time_past_its_due() -> None:
    a = _awaiting()
    a.sent("b", 10.0, 50.0)  # due 150 ms later
    assert a.overdue(10.149) == {}
    assert a.overdue(10.250) == {"b": pytest.approx(100.0)}
    a.answered("b", 10.3)
    assert a.overdue(11.0) == {} and a.waiting("b") == 0


def test_a_later_request_does_not_excuse_an_older_ones_wait() -> None:
    a = _awaiting()
    a.sent("b", 0.0, 50.0)
    a.sent("b", 0.1, 50.0)  # due 0.25 on its own: the first token is owed from 0.15 all the same
    assert a.overdue(0.2) == {"b": pytest.approx(50.0)}


def test_the_longest_due_time_counts_after_an_answer() -> None:
    a = _awaiting()
    a.sent("b", 0.0, 1000.0)  # a long prefill: due 2.05 s later
    a.sent("b", 0.0, 10.0)  # a short one, answered first
    a.answered("b", 0.05)
    assert a.overdue(1.5) == {}  # the long one may still be the one waiting
    assert a.overdue(2.2) == {"b": pytest.approx(100.0)}  # 2.05 s after the answer at 0.05


def test_an_answer_shows_life_and_a_drop_does_not() -> None:
    a = _awaiting()
    for _ in range(3):
        a.sent("b", 0.0, 50.0)
    a.dropped("b")  # a failure: no first token, no sign of life
    assert a.waiting("b") == 2 and a.overdue(0.2) == {"b": pytest.approx(50.0)}
    a.answered("b", 0.2)  # alive at 0.2: the last wait is owed from then
    assert a.overdue(0.3) == {} and a.overdue(0.4) == {"b": pytest.approx(50.0)}


def test_counts_never_go_below_zero_and_a_new_wait_is_not_an_old_one() -> None:
    a = _awaiting()
    a.answered("b", 0.0)
    a.dropped("b")
    assert a.waiting("b") == 0
    a.sent("b", 0.0, 50.0)
    a.answered("b", 0.01)  # the wait ends: its heap entry is stale from now on
    a.sent("b", 5.0, 50.0)  # a new wait: the old entry (due 0.15) must not read as this one
    assert a.overdue(5.1) == {}
    assert a.overdue(5.2) == {"b": pytest.approx(50.0)}


def test_a_wait_long_past_any_timeout_is_a_lost_event_and_forgotten() -> None:
    a = _awaiting()  # forget_s: 120
    a.sent("b", 0.0, 50.0)
    assert a.overdue(100.0) == {"b": pytest.approx(99_850.0)}
    assert a.overdue(121.0) == {} and a.waiting("b") == 0  # not exiled for good
    a.sent("b", 200.0, 50.0)
    assert a.overdue(200.2) == {"b": pytest.approx(50.0)}


def test_off_by_configuration() -> None:
    a = AwaitingFirstToken(OverdueParams(factor=0.0, after_ms=float("inf")))
    a.sent("b", 0.0, 50.0)
    assert a.overdue(1e6) == {} and a.waiting("b") == 0


_event = st.tuples(
    st.sampled_from(["sent", "answered", "dropped", "check"]),
    st.sampled_from(["a", "b", "c"]),
    st.floats(0.0, 0.5),  # time step
    st.sampled_from([0.0, 10.0, 50.0, 400.0]),  # predicted TTFT
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_event, max_size=80))
def test_overdue_is_every_silent_backend_past_its_due_and_no_other(
    events: list[tuple[str, str, float, float]],
) -> None:
    """Against a plain model of the rule (the heap and its stale entries are an optimisation)."""
    a, now = _awaiting(), 0.0
    model: dict[str, list[float]] = {}  # backend -> [count, since, longest due ms]
    for kind, backend, step, ttft in events:
        now += step
        wait = model.get(backend)
        if kind == "sent":
            due = 2.0 * ttft + 50.0
            if wait is None:
                model[backend] = [1, now, due]
            else:
                wait[0] += 1
                wait[2] = max(wait[2], due)
            a.sent(backend, now, ttft)
        elif kind == "answered":
            if wait is not None:
                wait[0] -= 1
                wait[1] = max(wait[1], now)
                if wait[0] == 0:
                    del model[backend]
            a.answered(backend, now)
        elif kind == "dropped":
            if wait is not None:
                wait[0] -= 1
                if wait[0] == 0:
                    del model[backend]
            a.dropped(backend)
        late = a.overdue(now)
        assert set(late) <= set(model)
        for b, (count, since, due) in model.items():
            excess = (now - since) * 1000.0 - due
            if excess > 1e-6:  # (within a float's rounding of due, either answer is right)
                assert late[b] == pytest.approx(excess, abs=1e-6)
            elif excess < -1e-6:
                assert b not in late
            assert a.waiting(b) == count
