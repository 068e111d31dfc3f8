"""``slo_cost``: the cheapest candidate whose predicted p90 TTFT meets the objective."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.cost import expected_cost
from routing.fleet_view import FleetView
from routing.pipeline.pickers import MarginPicker
from routing.policies import build_router
from routing.policies.slo_cost import MISSES_OBJECTIVE, CostMarginPicker
from routing.price import Price
from routing.types import FleetSnapshot
from tests.routing.routing_fixtures import fleet, profile, state

LOCAL = Price(prompt_per_mtok=3.0, cached_prompt_per_mtok=0.3, completion_per_mtok=15.0)
REMOTE = Price(prompt_per_mtok=0.5, completion_per_mtok=1.5)


def _two_regions(remote_rtt: float = 150.0) -> FleetSnapshot:
    return fleet(
        state("local", "r1", {"price": LOCAL}, rtt_ms=1.0, running=0, waiting=0),
        state("remote", "r2", {"price": REMOTE}, rtt_ms=remote_rtt, running=0, waiting=0),
    )


def _decide(objective: float | None, **params: object) -> tuple[str, str]:
    router = build_router("slo_cost", params)
    decision = router.decide(
        profile(prompt_tokens=500, max_tokens=64, ttft_objective_ms=objective),
        _two_regions(),
        0.0,
    )
    assert decision.chosen is not None
    return decision.chosen.backend, decision.chosen.reason


def test_both_meet_the_objective_so_the_cheaper_wins() -> None:
    backend, reason = _decide(2000.0)
    assert backend == "remote"
    assert "expected cost among 2 of 2 meeting" in reason and "meets the objective" in reason


def test_a_tight_objective_forces_the_expensive_fast_backend() -> None:
    backend, reason = _decide(120.0)
    assert backend == "local"
    assert "among 1 of 2 meeting" in reason


def test_when_none_meets_the_fastest_is_chosen_and_says_so() -> None:
    backend, reason = _decide(5.0)
    assert backend == "local"
    assert "none of 2 meets" in reason and "misses the objective" in reason


def test_no_objective_means_fastest_unless_a_default_is_configured() -> None:
    backend, reason = _decide(None)
    assert backend == "local" and "no TTFT objective" in reason
    backend, _ = _decide(None, default_objective_ms=2000.0)
    assert backend == "remote"


def test_explain_shows_every_candidates_cost_p90_and_why() -> None:
    router = build_router("slo_cost")
    decision = router.explain(
        profile(prompt_tokens=500, max_tokens=64, ttft_objective_ms=120.0), _two_regions(), 0.0
    )
    local, remote = decision.ranked
    assert local.backend == "local" and remote.backend == "remote"
    assert local.expected_cost is not None and remote.expected_cost is not None
    assert remote.expected_cost < local.expected_cost
    assert remote.predicted_ttft_p90_ms is not None and remote.predicted_ttft_p90_ms > 120.0
    assert remote.reason.startswith("misses the objective (p90 ")
    assert remote.score >= MISSES_OBJECTIVE


def test_cost_counts_cached_prompt_tokens_at_the_cached_price() -> None:
    view = FleetView(_two_regions())
    rows = np.arange(2)
    cold = expected_cost(view, rows, 1000, {}, 100, np.zeros(2))
    warm = expected_cost(view, rows, 1000, {0: 800.0}, 100, np.zeros(2))
    assert cold.tolist() == pytest.approx([(1000 * 3.0 + 100 * 15.0) / 1e6, 650 / 1e6 * 1.0])
    assert warm[0] == pytest.approx((200 * 3.0 + 800 * 0.3 + 100 * 15.0) / 1e6)
    assert warm[1] == cold[1]
    assert Price(prompt_per_mtok=2.0).tokens_cost(10, 10, 10) == pytest.approx(40 / 1e6)
    assert LOCAL.tokens_cost(0, 10, 0) == pytest.approx(3 / 1e6)


def test_hourly_capacity_costs_nothing_idle_and_its_share_of_the_hour_when_full() -> None:
    hourly = Price(hourly=3600.0)
    snapshot = fleet(
        state(
            "d", "r1", {"price": hourly, "max_num_seqs": 10, "prefill_tokens_per_s": 1000.0,
                        "itl_ms": 10.0},
        ),
        state("free", "r1"),
    )  # fmt: skip
    view = FleetView(snapshot)
    rows = np.arange(2)
    service_s = 1000 / 1000.0 + 100 * 0.010  # prefill + decode
    idle = expected_cost(view, rows, 1000, {}, 100, np.zeros(2))
    half = expected_cost(view, rows, 1000, {}, 100, np.array([5.0, 0.0]))
    full = expected_cost(view, rows, 1000, {}, 100, np.array([40.0, 0.0]))
    assert idle.tolist() == [0.0, 0.0]
    assert half[0] == pytest.approx(1.0 * service_s / 10 * 0.5)
    assert full[0] == pytest.approx(1.0 * service_s / 10)
    assert full[1] == 0.0


def test_equal_prices_spread_among_the_cheap_twins() -> None:
    router = build_router("slo_cost", {"default_objective_ms": 5000.0}, 3)
    snapshot = fleet(
        state("a", "r2", {"price": REMOTE}, rtt_ms=100.0, running=0, waiting=0),
        state("b", "r2", {"price": REMOTE}, rtt_ms=100.0, running=0, waiting=0),
        state("c", "r1", {"price": LOCAL}, rtt_ms=1.0, running=0, waiting=0),
    )
    chosen = set()
    for step in range(40):
        decision = router.decide(profile(prompt_tokens=100), snapshot, float(step))
        assert decision.chosen is not None
        chosen.add(decision.chosen.backend)
        router.release(decision.chosen.backend)
    assert chosen == {"a", "b"}


_SPEC = st.fixed_dictionaries(
    {
        "rtt": st.floats(0.0, 400.0),
        "waiting": st.integers(0, 300),
        "prompt": st.floats(0.0, 10.0),
        "completion": st.floats(0.0, 30.0),
    }
)


@settings(max_examples=60, deadline=None)
@given(
    backends=st.lists(_SPEC, min_size=1, max_size=6),
    objective=st.floats(20.0, 3000.0),
    prompt_tokens=st.integers(0, 8000),
    seed=st.integers(0, 5),
)
def test_chosen_meets_the_objective_whenever_any_does_and_is_cheapest_within_margin(
    backends: list[dict[str, float]], objective: float, prompt_tokens: int, seed: int
) -> None:
    states = [
        state(
            f"b{i}",
            f"r{i % 3}",
            {"price": Price(b["prompt"], None, b["completion"]), "max_num_seqs": 64},
            rtt_ms=b["rtt"],
            running=min(int(b["waiting"]), 64),
            waiting=int(b["waiting"]),
        )
        for i, b in enumerate(backends)
    ]
    snapshot = fleet(*states)
    prof = profile(prompt_tokens=prompt_tokens, max_tokens=32, ttft_objective_ms=objective)
    router = build_router("slo_cost", {"max_queue_ratio": 100.0}, seed)
    full = router.explain(prof, snapshot, 0.0).ranked
    decision = router.decide(prof, snapshot, 0.0)
    assert decision.chosen is not None
    by_name = {c.backend: c for c in full}
    meeting = [c for c in full if (c.predicted_ttft_p90_ms or 0.0) <= objective]
    chosen = by_name[decision.chosen.backend]
    if meeting:
        cheapest = min(c.expected_cost or 0.0 for c in meeting)
        assert chosen in meeting
        assert (chosen.expected_cost or 0.0) <= cheapest * 1.02 + 1e-15
    else:
        fastest = min(c.predicted_ttft_ms or 0.0 for c in full)
        assert (chosen.predicted_ttft_ms or 0.0) <= fastest + 2.0 + 0.03 * fastest + 1e-9


def test_the_cost_margin_holds_for_negative_scores() -> None:
    """A keep-warm credit can push the best score below zero; the margin must still include it
    (``best * (1 + rel)`` selected nothing there and crashed scenario 3)."""
    picker = CostMarginPicker(0.05, MarginPicker())
    chosen, among = picker.pick(np.array([-10.0, -9.8, 3.0]), random.Random(0))
    assert chosen in (0, 1) and among == 2
