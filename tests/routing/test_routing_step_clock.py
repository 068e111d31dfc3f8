"""routing.step_clock: the wait for the next step boundary, from the ticks a gateway saw."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from routing.policies import build_router
from routing.predictor_detail import TERMS
from routing.step_clock import StepClock, phased
from routing.types import FirstToken, Observation
from tests.routing.routing_fixtures import fleet, profile, state

_STEP = TERMS.index("step")


def _ticking(period_ms: float, count: int, start: float = 10.0) -> tuple[StepClock, float]:
    clock = StepClock()
    at = start
    for _ in range(count):
        clock.seen("b", at)
        at += period_ms / 1000.0
    return clock, at - period_ms / 1000.0


@given(
    period=st.floats(5.0, 100.0),
    age_share=st.floats(0.0, 1.0),
    lead_share=st.floats(0.0, 0.99),
)
def test_steady_steps_give_the_exact_wait(
    period: float, age_share: float, lead_share: float
) -> None:
    """Steps back to back of one length: the wait is the time from eligibility to the next
    boundary, whatever the phase of the read and the lead (within the horizon)."""
    clock, last = _ticking(period, 6)
    age, lead = age_share * period, lead_share * period
    wait = clock.wait_ms("b", last + age / 1000.0, lead, period)
    assert wait is not None
    elapsed = age + lead
    boundary = period * (math.floor(elapsed / period) + 1)
    assert math.isclose(wait, boundary - elapsed, rel_tol=1e-6, abs_tol=1e-6)
    assert 0.0 < wait <= period + 1e-9


@given(period=st.floats(5.0, 100.0), late=st.floats(1.01, 50.0))
def test_no_tick_within_a_step_says_nothing(period: float, late: float) -> None:
    """A step longer than a decode step is in progress (or nothing streams there any more):
    its end cannot be told, and the half step stands."""
    clock, last = _ticking(period, 4)
    assert clock.wait_ms("b", last + late * period / 1000.0, 0.0, period) is None


@given(period=st.floats(5.0, 100.0), lead_share=st.floats(1.0, 3.0), age_share=st.floats(0, 1))
def test_past_the_horizon_says_nothing(period: float, lead_share: float, age_share: float) -> None:
    clock, last = _ticking(period, 4)
    age = age_share * period
    lead = max(lead_share * period, 2.0 * period - age) + 1e-3  # past float noise
    assert clock.wait_ms("b", last + age / 1000.0, lead, period) is None


def test_a_period_unlike_the_predictors_decode_step_is_not_used() -> None:
    """Ticks too sparse to measure a step (first tokens and ends of streams seconds apart)."""
    clock, last = _ticking(400.0, 3)
    assert clock.wait_ms("b", last, 0.0, 20.0) is None
    assert clock.wait_ms("b", last, 0.0, 400.0) is not None
    assert clock.wait_ms("b", last, 0.0, 1000.0) is None


def test_unknown_backend_or_a_single_tick_says_nothing() -> None:
    clock = StepClock()
    assert clock.wait_ms("b", 1.0, 0.0, 20.0) is None
    clock.seen("b", 1.0)
    assert clock.wait_ms("b", 1.0, 0.0, 20.0) is None


def test_repeated_and_late_ticks_count_once() -> None:
    """Many streams see one step: the same tick (or an older one) changes nothing."""
    clock, last = _ticking(20.0, 5)
    before = clock.wait_ms("b", last + 0.005, 2.0, 20.0)
    clock.seen("b", last)
    clock.seen("b", last - 0.001)
    assert clock.wait_ms("b", last + 0.005, 2.0, 20.0) == before


@given(steps=st.lists(st.floats(15.0, 25.0), min_size=3, max_size=40), chunk=st.floats(40, 300))
def test_a_step_with_prefill_does_not_stretch_the_decode_step(
    steps: list[float], chunk: float
) -> None:
    """A long gap (a step that carried a prefill chunk, or one nobody saw) is not learned as
    the step's length: the period stays within the decode steps' range."""
    clock = StepClock()
    at = 1.0
    clock.seen("b", at)
    for k, ms in enumerate(steps):
        at += (ms + (chunk if k % 3 == 2 else 0.0)) / 1000.0
        clock.seen("b", at)
    period = clock.wait_ms("b", at, 0.0, 20.0)  # the full period: a read at a tick, no lead
    assert period is not None
    assert min(steps) - 1e-9 <= period <= max(steps) + 1e-9


def test_a_tick_handed_in_before_it_is_seen_is_not_read() -> None:
    """The simulator hands a step's end in when it ends; the gateway sees it a one-way trip
    later, and a decision before that reads the tick before."""
    clock, last = _ticking(20.0, 4)
    clock.seen("b", last + 0.020)  # handed in now, seen 20 ms on
    wait = clock.wait_ms("b", last + 0.010, 0.0, 20.0)
    assert wait is not None and math.isclose(wait, 10.0, abs_tol=1e-6)  # from the tick before
    early = StepClock()
    early.seen("b", 5.0)
    early.seen("b", 5.02)
    assert early.wait_ms("b", 4.0, 0.0, 20.0) is None  # every tick still ahead


_TERMS = (2.0, 0.0, 10.0, 30.0, 0.0, 0.0, 1.0, 10.0)  # rtt ... step=decode+half ... overhead


@given(age=st.floats(0.0, 20.0))
def test_phased_moves_the_half_step_to_the_wait(age: float) -> None:
    clock, last = _ticking(20.0, 5)
    now = last + age / 1000.0
    terms, ttft = phased(clock, "b", now, _TERMS, 53.0, 20.0)
    wait = clock.wait_ms("b", now, 12.0, 20.0)
    assert wait is not None
    assert math.isclose(ttft, 53.0 - 10.0 + wait)
    assert math.isclose(terms[_STEP], 30.0 - 10.0 + wait)
    assert terms[:_STEP] == _TERMS[:_STEP] and terms[_STEP + 1 :] == _TERMS[_STEP + 1 :]
    assert math.isclose(sum(terms), sum(_TERMS) - 10.0 + wait)


def test_phased_leaves_what_the_clock_cannot_tell() -> None:
    clock, last = _ticking(20.0, 5)
    assert phased(None, "b", last, _TERMS, 53.0, 20.0) == (_TERMS, 53.0)
    assert phased(clock, "b", last, _TERMS, 53.0, 0.0) == (_TERMS, 53.0)  # an idle engine
    assert phased(clock, "b", last + 1.0, _TERMS, 53.0, 20.0) == (_TERMS, 53.0)
    assert phased(clock, "other", last, _TERMS, 53.0, 20.0) == (_TERMS, 53.0)
    terms, ttft = phased(clock, "b", last, _TERMS, 5.0, 20.0)
    assert ttft >= 0.0 and terms[_STEP] <= _TERMS[_STEP]


@pytest.mark.parametrize(
    "size", [3, 12]
)  # the scalar decision path (<= 8 backends), the vector one
def test_a_decision_reports_the_wait_the_clock_tells(size: int) -> None:
    """The candidates a decision returns carry the clock's wait in place of the half step, in
    their predicted TTFT and their step term (what the learner is told was predicted)."""
    snapshot = fleet(
        *(state(f"b{k}", running=4, waiting=0, rtt_ms=2.0, metrics_as_of=0.9) for k in range(size))
    )
    router = build_router("predicted_ttft", {}, 1)
    ask, now = profile(prompt_tokens=100), 1.0
    before = router.explain(ask, snapshot, now).chosen
    assert before is not None and before.predicted_ttft_ms is not None
    decode = before.terms_ms["step"] / 1.5  # a one-step prefill: its step and half the one before
    clock = router.step_clock
    assert clock is not None
    for k in range(size):
        for n in reversed(range(4)):  # oldest first
            clock.seen(f"b{k}", now - 0.005 - n * decode / 1000.0)
    after = router.explain(ask, snapshot, now).chosen
    assert after is not None and after.backend == before.backend
    lead = before.terms_ms["rtt"] + before.terms_ms["first_token_overhead"]
    wait = clock.wait_ms(before.backend, now, lead, decode)
    assert wait is not None
    moved = wait - 0.5 * decode
    assert after.predicted_ttft_ms == pytest.approx(before.predicted_ttft_ms + moved)
    assert after.terms_ms["step"] == pytest.approx(before.terms_ms["step"] + moved)


def test_the_router_ticks_on_tokens_it_is_told_of_and_not_on_failures() -> None:
    router = build_router("predicted_ttft", {}, 1)
    clock = router.step_clock
    assert clock is not None
    router.observe(Observation(backend="b", at=1.0, ok=True))
    router.observe(Observation(backend="b", at=1.01, ok=False))  # no token came
    router.observe_first_token(FirstToken("b", 1.02, 30.0, {}, 10, 0))
    assert clock.period_ms("b") == pytest.approx(20.0)
    assert clock.period_ms("other") is None
    assert build_router("round_robin", {}, 1).step_clock is None


@given(
    step=st.floats(8.0, 60.0),
    jitters=st.lists(
        st.lists(st.floats(0.0, 3.0), min_size=1, max_size=8), min_size=3, max_size=30
    ),
)
def test_the_tokens_of_one_step_count_once(step: float, jitters: list[list[float]]) -> None:
    """A gateway relaying many streams from one engine gets each step's tokens a few ms apart
    (each path and detokeniser its own jitter): the step is still learned as one step, not
    as the gaps between its tokens."""
    clock = StepClock()
    for k, arrivals in enumerate(jitters):
        end = 1.0 + k * step / 1000.0
        for jitter in sorted(arrivals):
            clock.seen("b", end + jitter / 1000.0)
    period = clock.period_ms("b")
    assert period is not None and step - 3.0 <= period <= step + 3.0


def test_a_long_first_step_does_not_hold_the_period() -> None:
    """The first gap a clock sees can be a step with prefill (60 ms): the decode steps after
    it (20 ms) still bring the period down to theirs."""
    clock = StepClock()
    at = 1.0
    clock.seen("b", at)
    at += 0.060
    for _ in range(80):
        clock.seen("b", at)
        at += 0.020
    period = clock.period_ms("b")
    assert period is not None and period == pytest.approx(20.0, abs=0.5)


def test_the_phase_a_decision_used_is_told_for_that_decision_only() -> None:
    clock, last = _ticking(20.0, 5)
    now = last + 0.004
    assert clock.told("b", now) is None  # no decision yet
    terms, _ = phased(clock, "b", now, _TERMS, 53.0, 20.0)
    phase = clock.told("b", now)
    assert phase is not None
    assert phase.tick == last and phase.period_ms == pytest.approx(20.0)
    assert phase.half_step_ms == 10.0
    assert phase.wait_ms == clock.wait_ms("b", now, 12.0, 20.0)
    assert terms[_STEP] == pytest.approx(_TERMS[_STEP] - phase.half_step_ms + phase.wait_ms)
    assert clock.told("b", now + 0.001) is None  # another decision's time: not this phase
    phased(clock, "b", last + 1.0, _TERMS, 53.0, 20.0)  # silence: the half step stands
    assert clock.told("b", last + 1.0) is None


@pytest.mark.parametrize("size", [3, 12])
def test_step_phase_off_keeps_the_half_step_while_the_clock_listens(size: int) -> None:
    snapshot = fleet(
        *(state(f"b{k}", running=4, waiting=0, rtt_ms=2.0, metrics_as_of=0.9) for k in range(size))
    )
    on, off = (
        build_router("predicted_ttft", {}, 1),
        build_router("predicted_ttft", {"step_phase": False}, 1),
    )
    ask, now = profile(prompt_tokens=100), 1.0
    before = off.explain(ask, snapshot, now).chosen
    assert before is not None
    decode = before.terms_ms["step"] / 1.5
    for router in (on, off):
        assert router.step_clock is not None
        for k in range(size):
            for n in reversed(range(4)):
                router.step_clock.seen(f"b{k}", now - 0.005 - n * decode / 1000.0)
    after_off, after_on = off.explain(ask, snapshot, now).chosen, on.explain(ask, snapshot, now)
    assert after_off is not None and after_on.chosen is not None
    assert after_off.terms_ms["step"] == pytest.approx(before.terms_ms["step"])  # the half step
    assert off.step_clock is not None and off.step_clock.period_ms("b0") == pytest.approx(decode)
    assert off.step_clock.told(before.backend, now) is None
    assert on.step_clock is not None and on.step_clock.told(after_on.chosen.backend, now)


def test_step_ends_blurred_past_a_share_of_the_step_say_nothing() -> None:
    """Reads late by a busy path (and other streams' reads of one step a few ms on) make gaps
    stray from the step: past a share of it the wait cannot be told, and half a step stands."""
    steady, last = _ticking(20.0, 12)
    assert steady.jitter_ms("b") == pytest.approx(0.0, abs=1e-6)
    assert steady.wait_ms("b", last + 0.002, 0.0, 20.0) is not None
    blurred, at = StepClock(), 10.0
    blurred.seen("b", at)
    for k in range(30):  # gaps of 26 and 14 ms: the step is still 20 on average
        at += 0.014 if k % 2 else 0.026
        blurred.seen("b", at)
    period = blurred.period_ms("b")
    assert period is not None and 17.0 < period < 23.0
    assert blurred.jitter_ms("b") > 0.15 * period
    assert blurred.wait_ms("b", at + 0.002, 0.0, 20.0) is None


@given(ticks=st.lists(st.floats(0.0, 0.2), min_size=1, max_size=40))
def test_a_bound_feed_learns_what_seen_learns(ticks: list[float]) -> None:
    """``feed`` (bound once, as the simulator's step ticks and a relay stream use it) is
    ``seen`` without the lookup: the same ticks leave the same period, jitter and wait, and
    binding it before any tick is no tick."""
    by_name, bound = StepClock(), StepClock()
    feed = bound.feed("b")
    assert bound.period_ms("b") is None and bound.wait_ms("b", 1.0, 0.0, 20.0) is None
    at = 1.0
    for gap in ticks:
        at += gap
        by_name.seen("b", at)
        feed(at)
    assert bound.period_ms("b") == by_name.period_ms("b")
    assert bound.jitter_ms("b") == by_name.jitter_ms("b")
    for lead in (0.0, 7.5):
        assert bound.wait_ms("b", at + 0.003, lead, 20.0) == by_name.wait_ms(
            "b", at + 0.003, lead, 20.0
        )


def test_a_feed_bound_after_ticks_goes_on_where_seen_left_off() -> None:
    """Binding a backend the clock already knows hands in to the same track (a relay stream
    binds its backend while others' streams have ticked it)."""
    by_name, mixed = StepClock(), StepClock()
    at = 1.0
    for i in range(12):
        at += 0.02
        by_name.seen("b", at)
        if i < 6:
            mixed.seen("b", at)
        else:
            mixed.feed("b")(at)
    assert mixed.period_ms("b") == by_name.period_ms("b")
    assert mixed.jitter_ms("b") == by_name.jitter_ms("b")
