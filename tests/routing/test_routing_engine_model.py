"""The engine-step, own-prefill and stale-scrape parts of the prediction (through the router)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from routing.types import BackendKind, FleetSnapshot, Observation
from tests.routing.routing_fixtures import fleet, profile, state

SERVERLESS = {"kind": BackendKind.SERVERLESS, "cold_start_ms": 5000.0, "idle_timeout_s": 100.0}


def _terms(
    router: PipelineRouter, snapshot: FleetSnapshot, now: float, **prof: Any
) -> dict[str, float]:
    return dict(router.explain(profile(**prof), snapshot, now).ranked[0].terms_ms)


def test_the_step_term_grows_with_the_batch_and_the_steps_the_prefill_spans() -> None:
    router = build_router("predicted_ttft", {}, 0)
    idle = fleet(state("a", running=0, waiting=0, as_of=1.0))
    assert _terms(router, idle, 1.0, prompt_tokens=5000)["step"] == 0.0  # nothing decodes
    half = fleet(state("a", running=128, waiting=0, as_of=1.0))  # itl 20 ms at half a batch
    one = _terms(router, half, 1.0, prompt_tokens=1000)["step"]
    assert math.isclose(one, 20.0 * 1.5)  # the rest of the step in progress + one step
    three = _terms(router, half, 1.0, prompt_tokens=5000)["step"]  # 1920 tokens a step
    assert math.isclose(three, 20.0 * 3.5)
    full = fleet(state("a", running=256, waiting=0, as_of=1.0))
    assert _terms(router, full, 1.0, prompt_tokens=1000)["step"] > one
    budget = fleet(state("a", running=128, waiting=0, as_of=1.0,
                         spec_kwargs={"max_num_batched_tokens": 8192}))  # fmt: skip
    assert math.isclose(_terms(router, budget, 1.0, prompt_tokens=5000)["step"], 30.0)


def test_own_requests_since_the_scrape_queue_by_their_predicted_work_until_due() -> None:
    router = build_router("predicted_ttft", {"margin_ms": 0, "margin_rel": 0}, 0)
    snapshot = fleet(state("a", running=10, waiting=0, as_of=0.0))
    assert _terms(router, snapshot, 1.0, prompt_tokens=100)["queue"] == 0.0
    big = router.decide(profile(prompt_tokens=8000), snapshot, 1.0).ranked[0]  # 800 ms prefill
    queued = _terms(router, snapshot, 1.01, prompt_tokens=100)["queue"]
    assert queued > 0.9 * big.terms_ms["prefill"]
    # Once its first token should be out, it only decodes beside later requests.
    assert big.predicted_ttft_ms is not None
    due = 1.0 + big.predicted_ttft_ms / 1000.0
    assert _terms(router, snapshot, due + 0.01, prompt_tokens=100)["queue"] == 0.0
    # A newer scrape shows it: no longer counted as ours.
    router.decide(profile(prompt_tokens=8000), snapshot, 2.0)
    rescraped = fleet(state("a", running=11, waiting=0, as_of=2.05))
    assert _terms(router, rescraped, 2.1, prompt_tokens=100)["queue"] == 0.0
    # A reservation the router did not take itself (a failover) counts at a typical size.
    router.reserve("a", 2.2)
    assert _terms(router, rescraped, 2.21, prompt_tokens=100)["queue"] > 0.0
    router.release("a")
    assert _terms(router, rescraped, 2.21, prompt_tokens=100)["queue"] == 0.0


def test_a_scrape_still_showing_our_finished_request_is_corrected() -> None:
    """Live acceptance finding: waiting=1 from our own just-finished request queued the next."""
    router = build_router("predicted_ttft", {}, 0)
    first = fleet(state("a", running=0, waiting=0, as_of=0.0))
    router.decide(profile(prompt_tokens=1000), first, 0.5)
    ghost = fleet(state("a", running=0, waiting=1, as_of=1.0))  # scraped before it finished
    assert _terms(router, ghost, 1.05, prompt_tokens=1000)["queue"] > 0.0
    router.observe(Observation("a", 1.1, ok=True, ttft_ms=120.0))
    assert _terms(router, ghost, 1.2, prompt_tokens=1000)["queue"] == 0.0
    # The same for a running ghost: its decode is not charged to the next request.
    router.decide(profile(prompt_tokens=1000), first, 1.3)
    running = fleet(state("a", running=1, waiting=0, as_of=1.5))
    assert _terms(router, running, 1.6, prompt_tokens=1000)["step"] > 0.0
    router.observe(Observation("a", 1.7, ok=True, ttft_ms=120.0))
    assert _terms(router, running, 1.8, prompt_tokens=1000)["step"] == 0.0


def test_a_scrape_showing_running_sequences_means_a_serverless_backend_is_warm() -> None:
    router = build_router("predicted_ttft", {}, 0)
    busy = fleet(state("s", spec_kwargs=SERVERLESS, running=20, waiting=0, as_of=300.0))
    assert _terms(router, busy, 301.0)["cold_start"] == 0.0
    waking = fleet(state("s", spec_kwargs=SERVERLESS, running=0, waiting=3, as_of=300.0))
    assert _terms(router, waking, 301.0)["cold_start"] == 5000.0  # waiting alone: maybe cold
    stale = fleet(state("s", spec_kwargs=SERVERLESS, running=20, waiting=0, as_of=100.0))
    assert _terms(router, stale, 301.0)["cold_start"] == 5000.0  # busy long before the timeout


@settings(max_examples=60, deadline=None)
@given(
    running=st.integers(0, 300),
    more_running=st.integers(0, 100),
    prompt=st.integers(0, 20_000),
    budget=st.integers(64, 8192),
)
def test_a_bigger_batch_never_lowers_the_prediction(
    running: int, more_running: int, prompt: int, budget: int
) -> None:
    spec = {"max_num_batched_tokens": budget}
    small = state("a", running=running, waiting=0, as_of=9.0, spec_kwargs=spec)
    big = state("b", running=running + more_running, waiting=0, as_of=9.0, spec_kwargs=spec)
    ranked = (
        build_router("predicted_ttft", {"max_queue_ratio": 100}, 0)
        .explain(profile(prompt_tokens=prompt), fleet(small, big), 10.0)
        .ranked
    )
    a, b = (next(c for c in ranked if c.backend == name) for name in ("a", "b"))
    assert b.terms_ms["step"] >= a.terms_ms["step"]
    assert b.predicted_ttft_ms is not None and a.predicted_ttft_ms is not None
    assert b.predicted_ttft_ms >= a.predicted_ttft_ms


def test_remote_prefixes_steer_every_prefix_aware_policy_and_no_other() -> None:
    hashes = tuple(range(500, 600))
    snapshot = fleet(state("a", running=5, waiting=0, as_of=1.0),
                     state("b", running=5, waiting=0, as_of=1.0))  # fmt: skip
    prof = profile(prompt_tokens=1600, prefix_hashes=hashes)
    for policy in ("predicted_ttft", "llm_d", "cache_aware"):
        router = build_router(policy, {}, 0)
        assert router.keeps_prefixes
        assert router.note_remote_prefix("b", dict.fromkeys(hashes, 1.0), 2.0) == len(hashes)
        assert router.note_remote_prefix("b", dict.fromkeys(hashes, 0.5), 2.0) == 0  # older
        assert router.decide(prof, snapshot, 2.0).ranked[0].backend == "b", policy
    plain = build_router("round_robin", {}, 0)
    assert not plain.keeps_prefixes and plain.note_remote_prefix("b", {1: 1.0}, 2.0) == 0


def test_backends_that_left_the_fleet_are_forgotten_by_the_load_columns() -> None:
    router = build_router("predicted_ttft", {}, 0)
    both = fleet(state("a", running=1, waiting=0, as_of=0.0), state("b", running=1, as_of=0.0))
    router.decide(profile(prompt_tokens=100), both, 1.0)
    router.decide(profile(prompt_tokens=100), both, 1.0)
    router.observe(Observation("a", 1.5, ok=True, ttft_ms=50.0))
    router.observe(Observation("b", 1.5, ok=True, ttft_ms=50.0))
    router.reserve("b", 1.6)  # still counted as prefilling on "b"
    alone = fleet(state("a", running=1, waiting=0, as_of=0.0))
    assert router.decide(profile(prompt_tokens=100), alone, 1.7).ranked[0].backend == "a"
