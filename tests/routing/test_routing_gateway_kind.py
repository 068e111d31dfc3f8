"""Gateway-kind candidates (another Meridian), loop prevention, and block-size matching."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.policies import build_router
from routing.prefix_index import matching_chain
from routing.types import BackendKind, BackendState, Candidate, Observation, RequestProfile
from tests.routing.routing_fixtures import MODEL, fleet, profile, state

GATEWAY = {"kind": BackendKind.GATEWAY, "first_token_overhead_ms": 2.0}


def remote(report: dict[str, float] | None, name: str = "gw-b", **kwargs: float) -> BackendState:
    kwargs.setdefault("rtt_ms", 80.0)
    kwargs.setdefault("as_of", 9.0)
    return state(name, "r2", GATEWAY, downstream_ttft_ms=report, **kwargs)


def only(
    router_name: str, backend: BackendState, prof: RequestProfile, now: float = 10.0
) -> Candidate:
    router = build_router(router_name, {}, 0)
    return router.explain(prof, fleet(backend), now).ranked[0]


def test_gateway_prediction_is_rtt_plus_downstream_plus_prefill_and_bias() -> None:
    got = only(
        "predicted_ttft", remote({MODEL: 40.0}, downstream_as_of=7.0), profile(prompt_tokens=1000)
    )
    terms = got.terms_ms
    assert terms["rtt"] == 80.0 and terms["downstream"] == 40.0 and terms["prefill"] == 100.0
    assert terms["queue"] == 0.0 and terms["cold_start"] == 0.0 and terms["bias"] == 0.0
    assert got.predicted_ttft_ms == sum(terms.values())
    assert got.term_age_s["downstream"] == 3.0 and got.term_spread_ms["downstream"] > 8.0
    # Without a report the remote is modelled like any other backend.
    plain = only("predicted_ttft", remote(None, in_flight=300), profile(prompt_tokens=1000))
    assert plain.terms_ms["downstream"] == 0.0 and plain.terms_ms["queue"] > 0.0
    assert plain.term_age_s["downstream"] == -1.0 and plain.term_spread_ms["downstream"] == 0.0


def test_learned_bias_applies_to_gateways_too() -> None:
    router = build_router("predicted_ttft", {"bias_learning_rate": 1.0}, 0)
    snapshot = fleet(remote({MODEL: 40.0}))
    first = router.decide(profile(prompt_tokens=0), snapshot, 10.0).ranked[0]
    assert first.predicted_ttft_ms == 122.0
    router.observe(Observation("gw-b", 11.0, ok=True, ttft_ms=150.0, predicted_ttft_ms=122.0,
        predicted_terms_ms=dict(first.terms_ms)))  # fmt: skip
    again = router.explain(profile(prompt_tokens=0), snapshot, 12.0).ranked[0]
    assert again.terms_ms["bias"] == 28.0 and again.predicted_ttft_ms == 150.0


@settings(max_examples=60, deadline=None)
@given(
    low=st.floats(0, 5_000),
    more=st.floats(0.001, 5_000),
    prompt=st.integers(0, 20_000),
    age=st.floats(0, 60),
    long_form=st.booleans(),
)
def test_a_larger_downstream_report_never_lowers_the_prediction(
    low: float, more: float, prompt: int, age: float, long_form: bool
) -> None:
    cls = "long_form" if long_form else "interactive"
    prof = profile(prompt_tokens=prompt, latency_class=cls, max_tokens=50)
    router = build_router("predicted_ttft", {}, 0)
    snapshot = fleet(
        remote({MODEL: low}, "gw-a", downstream_as_of=10.0 - age),
        remote({MODEL: low + more}, "gw-b", downstream_as_of=10.0 - age),
    )
    ranked = {c.backend: c for c in router.explain(prof, snapshot, 10.0).ranked}
    a, b = ranked["gw-a"], ranked["gw-b"]
    assert a.predicted_ttft_ms is not None and b.predicted_ttft_ms is not None
    assert b.predicted_ttft_ms >= a.predicted_ttft_ms and b.score >= a.score
    assert a.predicted_ttft_p90_ms is not None and b.predicted_ttft_p90_ms is not None
    assert b.predicted_ttft_p90_ms >= a.predicted_ttft_p90_ms


def test_a_gateway_whose_remote_lacks_the_model_is_filtered_with_a_reason() -> None:
    router = build_router("predicted_ttft", {}, 0)
    snapshot = fleet(remote({"other": 5.0}, downstream_as_of=8.0), remote(None, "gw-c"), state("a"))
    decision = router.decide(profile(), snapshot, 10.0)
    assert {c.backend for c in decision.ranked} == {"gw-c", "a"}
    (rejection,) = decision.rejected
    assert rejection.backend == "gw-b" and rejection.filter == "downstream_serves"
    assert (
        rejection.reason
        == f"remote gateway reports no backend for model {MODEL!r} (report 2.0 s old)"
    )


def test_excluded_backends_are_rejected_as_loops() -> None:
    router = build_router("predicted_ttft", {}, 0)
    snapshot = fleet(remote({MODEL: 5.0}), state("a"))
    decision = router.decide(profile(exclude=frozenset({"gw-b", "elsewhere"})), snapshot, 10.0)
    assert [c.backend for c in decision.ranked] == ["a"]
    (rejection,) = decision.rejected
    assert rejection.filter == "not_excluded" and "exclude list" in rejection.reason
    assert "loop between gateways" in rejection.reason
    lonely = router.decide(profile(exclude=frozenset({"gw-b"})), fleet(remote({MODEL: 5.0})), 10.0)
    assert lonely.chosen is None and "not_excluded: 1" in lonely.note


def test_matching_chain_reads_every_kth_hash_or_nothing() -> None:
    chain = tuple(range(1, 13))
    assert matching_chain(chain, 16, 16) is chain
    assert matching_chain(chain, 16, 64) == (4, 8, 12)
    assert matching_chain(chain, 16, 24) == () and matching_chain(chain, 64, 16) == ()


def test_a_coarser_index_counts_cached_tokens_from_fine_profiles() -> None:
    router = build_router("predicted_ttft", {"block_tokens": 64}, 0)
    snapshot = fleet(state("a"), state("b"))
    hashes = tuple(range(1, 21))  # 20 blocks of 16 tokens = 5 blocks of 64
    prof = profile(prompt_tokens=330, prefix_hashes=hashes, block_tokens=16)
    chosen = router.decide(prof, snapshot, 1.0).ranked[0]
    router.observe(
        Observation(chosen.backend, 2.0, ok=True, prefix_hashes=hashes[:9], block_tokens=16)
    )
    ranked = {c.backend: c for c in router.explain(prof, snapshot, 3.0).ranked}
    assert ranked[chosen.backend].cached_tokens == 320
    # A chain the index cannot align with is ignored, never miscounted.
    odd = dataclasses.replace(prof, block_tokens=24)
    router.observe(Observation("b", 4.0, ok=True, prefix_hashes=hashes, block_tokens=24))
    assert all(c.cached_tokens == 0 for c in router.explain(odd, snapshot, 5.0).ranked)


def test_a_region_penalty_moves_the_score_not_the_predicted_ttft() -> None:
    router = build_router("predicted_ttft", {"margin_ms": 0, "margin_rel": 0}, 0)
    snapshot = fleet(state("a", "r1", rtt_ms=10.0), state("b", "r2", rtt_ms=12.0))
    plain = router.explain(profile(), snapshot, 1.0).ranked
    assert [c.backend for c in plain] == ["a", "b"]
    prof = profile(region_penalty_ms={"r1": 5.0})
    ranked = router.explain(prof, snapshot, 1.0).ranked
    assert [c.backend for c in ranked] == ["b", "a"]
    b, a = ranked
    assert a.predicted_ttft_ms is not None
    assert (
        a.predicted_ttft_ms == plain[0].predicted_ttft_ms and a.score == a.predicted_ttft_ms + 5.0
    )
    assert "placement" not in a.terms_ms and sum(a.terms_ms.values()) == a.predicted_ttft_ms
    assert a.reason.endswith(": placement +5.0") and b.score == b.predicted_ttft_ms
    assert hash(prof) == hash(profile())  # the preference does not make profiles unhashable
