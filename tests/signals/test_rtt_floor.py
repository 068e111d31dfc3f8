"""The robust probe RTT estimate: spikes discounted, persistent steps and drops followed."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from gateway.signals.probe_config import ProbeConfig
from gateway.signals.probe_measure import TimedRequest
from gateway.signals.probes import Prober
from gateway.signals.rtt_floor import RTT_FLOOR_WINDOW, RobustRtt, update
from tests.signals.support import target

ALPHA = 0.3  # the configured default


def run(samples: Sequence[float], alpha: float = ALPHA) -> list[float]:
    state, estimates = RobustRtt(), []
    for sample in samples:
        state = update(state, sample, alpha)
        assert state.estimate_ms is not None
        estimates.append(state.estimate_ms)
    return estimates


def test_a_single_upward_spike_barely_moves_the_estimate() -> None:
    for alpha in (ALPHA, 1.0):
        *steady, spiked, after = run([1.0] * 10 + [51.0, 1.0], alpha)
        # a plain EWMA would read 16 ms (alpha 0.3) or 51 ms (alpha 1)
        assert steady[-1] == 1.0
        assert spiked - 1.0 < 3.0
        assert after == 1.0


def test_a_persistent_400ms_step_shows_within_two_samples() -> None:
    estimates = run([1.0] * 10 + [401.0] * RTT_FLOOR_WINDOW)
    assert estimates[-1] == 401.0


def test_a_downward_move_is_followed_at_once() -> None:
    estimates = run([401.0] * 10 + [1.0])
    assert estimates[-1] == 1.0


def test_no_sample_leaves_the_state_as_it_was() -> None:
    state = update(RobustRtt(), 5.0, ALPHA)
    assert update(state, None, ALPHA) == state
    assert state.floor_ms == 5.0 and RobustRtt().floor_ms is None


@given(
    st.lists(st.floats(min_value=0.0, max_value=10_000.0), min_size=1, max_size=40),
    st.floats(min_value=0.01, max_value=1.0),
)
def test_the_estimate_stays_within_the_samples_range(samples: list[float], alpha: float) -> None:
    state = RobustRtt()
    for sample in samples:
        state = update(state, sample, alpha)
        assert state.estimate_ms is not None and state.floor_ms is not None
        assert min(samples) <= state.floor_ms <= state.estimate_ms <= sample <= max(samples)


def test_the_prober_routes_on_the_robust_estimate_and_exposes_the_floor() -> None:
    t = target("b", "http://127.0.0.1:9")  # never contacted: samples are handed in
    prober = Prober([t], ProbeConfig.model_validate({"ewma_alpha": ALPHA}))
    for total_ms in (1.0, 1.0, 51.0):
        summary = prober._record_probe("b", TimedRequest(200, total_ms, None), None)
    assert summary.rtt_floor_ms == 1.0
    assert summary.rtt_ms is not None and summary.rtt_ms < 2.0
    for _ in range(RTT_FLOOR_WINDOW):
        summary = prober._record_probe("b", TimedRequest(200, 401.0, None), None)
    assert summary.rtt_ms == summary.rtt_floor_ms == 401.0
