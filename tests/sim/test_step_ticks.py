"""The step clock against the emulator's engine: the wait it predicts is the engine's."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtests.emulator.config import EngineParams
from loadtests.emulator.engine import Engine, EventKind, SequenceRequest
from loadtests.sim.loop import Simulation
from loadtests.sim.step_ticks import StepTicks
from loadtests.sim.trace import build_trace
from routing.pipeline.router import PipelineRouter
from routing.step_clock import StepClock
from tests.sim.conftest import build, tiny

_GAP = 1.5  # a learned gap is at most this x the step before (step_clock)


def _run_until(engine: Engine, ticks: StepTicks, until: float) -> list[float]:
    """Step ``engine`` to ``until``, handing each step's end to the ticks (one gateway, a
    zero-length path); returns the first tokens' (eligible, scheduled) gaps in ms."""
    waits: list[float] = []
    while (at := engine.next_event_time()) is not None and at <= until:
        events = engine.advance(at)
        ticks.ended(0, engine.last_step_end)
        for event in events:
            if event.kind is EventKind.FIRST_TOKEN:
                ticks.streaming(0, 0, 1)
                waits.append(1000.0 * (event.scheduled_at - event.eligible_at))
    return waits


@settings(max_examples=60, deadline=None)
@given(
    at=st.floats(0.5, 3.0),
    overhead=st.floats(0.0, 25.0),
    batch=st.integers(1, 6),
)
def test_the_clock_tells_the_wait_for_the_step_in_progress(
    at: float, overhead: float, batch: int
) -> None:
    """A busy engine stepping decode-only: a request submitted at any moment waits for the
    step boundary after its fixed overhead, and the clock fed by the step ends says exactly
    that wait (the predictor's half step is off by up to half a step)."""
    params = EngineParams(
        decode_base_ms=19.5, decode_per_seq_ms=0.5, first_token_overhead_ms=overhead
    )
    engine = Engine(params, token_events=False)
    clock = StepClock()
    ticks = StepTicks([clock], ["e"], lambda gateway, backend: 0.0)
    for k in range(batch):
        engine.submit(SequenceRequest(k, 4, 100_000), 0.0)
    _run_until(engine, ticks, at)
    step_ms = params.decode_base_ms + params.decode_per_seq_ms * batch
    predicted = clock.wait_ms("e", at, overhead, step_ms)
    if predicted is None:  # only past the horizon (two steps from the last tick)
        assert 1000.0 * (at - engine.last_step_end) + overhead >= 2.0 * step_ms - 1e-6
        return
    engine.submit(SequenceRequest(99, 4, 1), at)
    (actual,) = _run_until(engine, ticks, at + 1.0)
    assert math.isclose(predicted, actual, abs_tol=1e-6)


def test_a_gateway_with_nothing_streaming_there_sees_no_step() -> None:
    clocks = [StepClock(), StepClock()]
    ticks = StepTicks(clocks, ["e"], lambda gateway, backend: 0.001 * (gateway + 1))
    ticks.streaming(1, 0, 1)
    ticks.ended(0, 1.0)
    ticks.ended(0, 1.02)
    ticks.ended(0, 1.02)  # the same step again (a wake without a new step)
    assert clocks[0].wait_ms("e", 1.03, 0.0, 20.0) is None
    wait = clocks[1].wait_ms("e", 1.03, 0.0, 20.0)  # seen 2 ms after each end
    assert wait is not None and math.isclose(wait, 20.0 - 8.0, abs_tol=1e-6)
    ticks.streaming(1, 0, -1)
    ticks.ended(0, 1.04)
    assert clocks[1].wait_ms("e", 1.045, 0.0, 20.0) is None  # no tick within a step
    assert not StepTicks([None], ["e"], lambda gateway, backend: 0.0).active


def test_the_simulator_feeds_each_predicted_ttft_router_its_steps() -> None:
    """In a run, each gateway's clock learns a step of each backend it streamed from,
    within the engine's decode step (base + per sequence x the batch)."""
    scenario = build(tiny(duration_s=10))
    sim = Simulation(scenario, build_trace(scenario, requests=60), "predicted_ttft")
    router = sim.routers[0]
    assert isinstance(router, PipelineRouter) and router.step_clock is not None
    run = sim.run()
    used = {sim.backends[int(b)].name for b in set(run.results.backend.tolist()) if b >= 0}
    assert used
    for name in used:
        engine = sim.by_name[name].engine.params
        low = engine.decode_base_ms
        high = low + engine.decode_per_seq_ms * engine.max_num_seqs
        period = router.step_clock.period_ms(name)
        assert period is not None and low <= period <= _GAP * high


def test_a_changed_path_moves_the_ticks_of_streams_already_running() -> None:
    """A ``path_delay`` changes the one-way time of answers already streaming: after
    ``repath`` their gateway sees the step ends that much later."""
    clock = StepClock()
    one_way = {0: 0.001}
    ticks = StepTicks([clock], ["e"], lambda gateway, backend: one_way[backend])
    ticks.streaming(0, 0, 1)
    ticks.ended(0, 1.0)
    ticks.ended(0, 1.02)
    one_way[0] = 0.011  # 10 ms more each way from now on
    ticks.ended(0, 1.04)  # not read again yet: still the old path
    ticks.repath(0)
    ticks.ended(0, 1.06)  # seen at 1.071: a 30 ms gap, learned (20 -> 21 ms)
    assert clock.period_ms("e") == pytest.approx(21.0)
    wait = clock.wait_ms("e", 1.0715, 0.0, 20.0)  # 0.5 ms after the tick (9.5 without repath)
    assert wait is not None and math.isclose(wait, 21.0 - 0.5, abs_tol=1e-6)
