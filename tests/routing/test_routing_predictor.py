"""Properties of the predicted-TTFT policy's prediction (through its public router)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.policies import build_router
from routing.types import BackendKind, BackendState, Candidate, LatencyClass, RequestProfile
from tests.routing.routing_fixtures import fleet, profile, state

SERVERLESS = {"kind": BackendKind.SERVERLESS, "cold_start_ms": 5000.0, "idle_timeout_s": 100.0}


def predicted(decision_ranked: tuple[Candidate, ...], backend: str) -> Candidate:
    return next(c for c in decision_ranked if c.backend == backend)


def ttft(c: Candidate) -> tuple[float, float]:
    assert c.predicted_ttft_ms is not None and c.predicted_ttft_p90_ms is not None
    return c.predicted_ttft_ms, c.predicted_ttft_p90_ms


def explain_one(
    backend_state: BackendState, prof: RequestProfile, now: float = 10.0, **fleet_kwargs: Any
) -> Candidate:
    router = build_router("predicted_ttft", {}, 0)
    return router.explain(prof, fleet(backend_state, **fleet_kwargs), now).ranked[0]


@settings(max_examples=60, deadline=None)
@given(
    prompt=st.integers(0, 20_000),
    cached_blocks=st.integers(0, 40),
    extra=st.integers(1, 40),
    running=st.integers(0, 600),
    waiting=st.integers(0, 200),
)
def test_more_cached_prefix_never_raises_predicted_ttft(
    prompt, cached_blocks, extra, running, waiting
) -> None:
    router = build_router("predicted_ttft", {}, 0)
    hashes = tuple(range(1, 81))
    snapshot = fleet(
        state("short", running=running, waiting=waiting, as_of=9.0),
        state("long", running=running, waiting=waiting, as_of=9.0),
    )
    router.reserve("x", 0.0)
    scorer = router.scorer
    scorer.index.record("short", hashes[:cached_blocks], 0.0)  # type: ignore[attr-defined]
    scorer.index.record("long", hashes[: cached_blocks + extra], 0.0)  # type: ignore[attr-defined]
    ranked = router.explain(
        profile(prompt_tokens=prompt, prefix_hashes=hashes), snapshot, 10.0
    ).ranked
    short, long = predicted(ranked, "short"), predicted(ranked, "long")
    assert long.cached_tokens >= short.cached_tokens
    assert ttft(long)[0] <= ttft(short)[0] and ttft(long)[1] <= ttft(short)[1]


@settings(max_examples=60, deadline=None)
@given(
    running=st.integers(0, 600),
    waiting=st.integers(0, 300),
    more=st.integers(1, 300),
    in_flight=st.integers(0, 2000),
    metrics=st.booleans(),
    long_form=st.booleans(),
)
def test_a_longer_queue_never_lowers_the_prediction(
    running, waiting, more, in_flight, metrics, long_form
) -> None:
    cls = LatencyClass.LONG_FORM if long_form else LatencyClass.INTERACTIVE
    prof = profile(prompt_tokens=500, latency_class=cls, max_tokens=100)
    if metrics:
        short = state("a", running=running, waiting=waiting, as_of=9.0)
        long = state("b", running=running, waiting=waiting + more, as_of=9.0)
    else:
        short = state("a", in_flight=in_flight)
        long = state("b", in_flight=in_flight + more)
    ranked = (
        build_router("predicted_ttft", {"max_queue_ratio": 100}, 0)
        .explain(prof, fleet(short, long), 10.0)
        .ranked
    )
    a, b = predicted(ranked, "a"), predicted(ranked, "b")
    assert ttft(b)[0] >= ttft(a)[0] and ttft(b)[1] >= ttft(a)[1] and b.score >= a.score


def test_terms_sum_to_the_prediction_and_carry_ages() -> None:
    c = explain_one(
        state("a", rtt_ms=20.0, running=300, waiting=10, as_of=8.0), profile(prompt_tokens=1000)
    )
    assert abs(sum(c.terms_ms.values()) - ttft(c)[0]) < 1e-6
    assert c.terms_ms["rtt"] == 20.0 and c.terms_ms["prefill"] == 100.0 and c.terms_ms["queue"] > 0
    assert (
        c.term_age_s["rtt"] == 2.0
        and c.term_age_s["queue"] == 2.0
        and c.term_age_s["prefill"] == -1.0
    )
    assert ttft(c)[1] > ttft(c)[0]


def test_stale_signals_widen_the_spread() -> None:
    fresh = explain_one(state("a", rtt_ms=50.0, running=300, waiting=50, as_of=10.0), profile())
    stale = explain_one(state("a", rtt_ms=50.0, running=300, waiting=50, as_of=-50.0), profile())
    assert stale.predicted_ttft_ms == fresh.predicted_ttft_ms
    assert stale.term_spread_ms["queue"] > fresh.term_spread_ms["queue"]
    assert ttft(stale)[1] > ttft(fresh)[1]


def test_rtt_falls_back_to_region_table_then_defaults() -> None:
    table = explain_one(state("a", region="far"), profile(), region_rtt_ms={"far": 70.0})
    home = explain_one(state("a", region="r1"), profile())
    unknown = explain_one(state("a", region="elsewhere"), profile())
    assert table.terms_ms["rtt"] == 70.0 and home.terms_ms["rtt"] == 1.0
    assert unknown.terms_ms["rtt"] == 100.0 and unknown.term_age_s["rtt"] == -1.0


def test_serverless_cold_probability_follows_idle_time() -> None:
    prof = profile(prompt_tokens=10)
    warm = explain_one(state("s", spec_kwargs=SERVERLESS, last_traffic_at=50.0), prof, now=100.0)
    ramp = explain_one(state("s", spec_kwargs=SERVERLESS, last_traffic_at=0.0), prof, now=100.0)
    cold = explain_one(state("s", spec_kwargs=SERVERLESS, last_traffic_at=0.0), prof, now=200.0)
    never = explain_one(state("s", spec_kwargs=SERVERLESS), prof, now=200.0)
    assert warm.terms_ms["cold_start"] == 0.0
    assert 0.0 < ramp.terms_ms["cold_start"] < 5000.0
    assert cold.terms_ms["cold_start"] == 5000.0 == never.terms_ms["cold_start"]
    assert cold.term_age_s["cold_start"] == 200.0 and never.term_age_s["cold_start"] == -1.0


def test_requests_to_a_cold_backend_wait_for_the_start_already_under_way() -> None:
    router = build_router("predicted_ttft", {}, 0)
    snapshot = fleet(state("s", spec_kwargs=SERVERLESS))
    first = router.decide(profile(), snapshot, 0.0).ranked[0]
    second = router.decide(profile(), snapshot, 1.0).ranked[0]
    assert first.terms_ms["cold_start"] == 5000.0
    assert abs(second.terms_ms["cold_start"] - 4000.0) < 1e-6
    after = router.decide(profile(), snapshot, 6.0).ranked[0]
    assert after.terms_ms["cold_start"] == 0.0


def test_long_form_scores_end_to_end() -> None:
    prof = profile(prompt_tokens=100, latency_class=LatencyClass.LONG_FORM, max_tokens=1000)
    c = explain_one(state("a", running=0, waiting=0, as_of=10.0), prof)
    assert c.predicted_e2e_ms == c.score
    # The configured ITL is a half-full batch's; this request would decode alone.
    alone = 20.0 * (1.0 + (1.0 / 256 - 0.5))
    assert abs(c.score - (ttft(c)[0] + alone * 1000)) < 1e-6
    default = explain_one(state("a"), profile(latency_class=LatencyClass.LONG_FORM))
    assert abs(default.score - ttft(default)[0] - alone * 256) < 1e-6
    busy = explain_one(state("a", running=255, waiting=0, as_of=10.0), prof)
    assert abs(busy.score - ttft(busy)[0] - 20.0 * 1.5 * 1000) < 1e-6


def test_fast_slow_region_tradeoff_prefers_cache_until_queue_dominates() -> None:
    router = build_router("predicted_ttft", {"margin_ms": 0, "margin_rel": 0}, 0)
    hashes = tuple(range(1, 200))
    router.scorer.index.record("warm", hashes, 0.0)  # type: ignore[attr-defined]
    prof = profile(prompt_tokens=3200, prefix_hashes=hashes)
    idle = fleet(
        state("warm", running=10, waiting=0, as_of=1.0),
        state("cold", running=10, waiting=0, as_of=1.0),
    )
    assert router.explain(prof, idle, 1.0).ranked[0].backend == "warm"
    busy = fleet(
        state("warm", running=256, waiting=200, as_of=1.0),
        state("cold", running=10, waiting=0, as_of=1.0),
    )
    assert router.explain(prof, busy, 1.0).ranked[0].backend == "cold"
