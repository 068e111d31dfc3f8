"""Every policy through ``build_router``: shared properties, then each baseline's own rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.errors import ErrorKind, RoutingError
from routing.policies import POLICIES, build_router
from routing.policies.round_robin import RoundRobinRouter
from routing.types import Observation, RequestProfile
from tests.routing.routing_fixtures import fleet, profile, state

ALL = sorted(POLICIES)

backend_states = st.builds(
    lambda i, healthy, ejected, circuit, region, model, running, waiting, in_flight: state(
        f"b{i}",
        region=region,
        spec_kwargs={"models": frozenset({model}), "max_num_seqs": 8},
        healthy=healthy,
        ejected_until=50.0 if ejected else None,
        circuit_open=circuit,
        running=running,
        waiting=waiting,
        in_flight=in_flight,
        kv_cache_usage=0.5,
    ),
    st.integers(0, 30),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["r1", "r2", "r3"]),
    st.sampled_from(["m", "other"]),
    st.none() | st.integers(0, 20),
    st.none() | st.integers(0, 40),
    st.integers(0, 60),
)
profiles = st.builds(
    lambda regions, exclude, prompt, hashes: profile(
        allowed_regions=regions, exclude=exclude, prompt_tokens=prompt, prefix_hashes=hashes
    ),
    st.none() | st.frozensets(st.sampled_from(["r1", "r2", "r3"]), min_size=1),
    st.frozensets(st.sampled_from([f"b{i}" for i in range(30)]), max_size=3),
    st.integers(0, 5000),
    st.lists(st.integers(0, 3), max_size=5).map(tuple),
)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(ALL), st.lists(backend_states, max_size=12), profiles, st.integers(0, 5))
def test_never_picks_a_filtered_backend_and_every_backend_is_accounted(
    name, states, prof, seed
) -> None:
    snapshot = fleet(*states)
    decision = build_router(name, {"max_ranked": 100}, seed).decide(prof, snapshot, 10.0)
    rejected = {r.backend for r in decision.rejected}
    ranked = {c.backend for c in decision.ranked}
    assert rejected.isdisjoint(ranked) and rejected | ranked == set(snapshot.backends)
    for c in decision.ranked:
        s = snapshot.backends[c.backend]
        assert prof.model in s.spec.models and c.backend not in prof.exclude and s.healthy
        assert not s.circuit_open and (s.ejected_until is None or s.ejected_until <= 10.0)
        assert prof.allowed_regions is None or s.spec.region in prof.allowed_regions
    if not decision.ranked:
        assert decision.chosen is None and decision.note.startswith("no backend")


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(ALL), st.lists(backend_states, max_size=10), profiles, st.integers(0, 5))
def test_same_inputs_and_seed_give_the_same_decisions(name, states, prof, seed) -> None:
    snapshot = fleet(*states)
    first, second = build_router(name, {}, seed), build_router(name, {}, seed)
    for step in range(3):
        assert first.decide(prof, snapshot, 10.0 + step) == second.decide(
            prof, snapshot, 10.0 + step
        )


@pytest.mark.parametrize("name", ALL)
def test_empty_fleet_is_a_clear_no_backend(name: str) -> None:
    decision = build_router(name, {}, 0).decide(profile(), fleet(), 0.0)
    assert decision.ranked == () and decision.chosen is None and "empty" in decision.note


@pytest.mark.parametrize("name", ALL)
def test_all_rejected_explains_each(name: str) -> None:
    snapshot = fleet(
        state("a", healthy=False), state("b", spec_kwargs={"models": frozenset({"x"})})
    )
    decision = build_router(name, {}, 0).decide(profile(), snapshot, 0.0)
    assert decision.chosen is None
    assert {(r.backend, r.filter) for r in decision.rejected} == {
        ("a", "healthy"),
        ("b", "serves_model"),
    }
    assert "healthy: 1" in decision.note and "serves_model: 1" in decision.note


@pytest.mark.parametrize("name", ALL)
def test_explain_shows_all_and_does_not_move_state(name: str) -> None:
    snapshot = fleet(*(state(f"b{i}", rtt_ms=float(i)) for i in range(10)))
    router, twin = build_router(name, {}, 3), build_router(name, {}, 3)
    explained = router.explain(profile(), snapshot, 1.0)
    assert len(explained.ranked) == 10 and explained.omitted == 0
    decided = router.decide(profile(), snapshot, 1.0)
    assert decided == twin.decide(profile(), snapshot, 1.0)
    assert len(decided.ranked) == 4 and decided.omitted == 6
    assert decided.ranked[0].reason.startswith("chosen") and "vs" in decided.ranked[1].reason


def test_round_robin_rotates_and_keeps_its_old_constructor() -> None:
    router = RoundRobinRouter()
    snapshot = fleet(state("a"), state("b"), state("c"))
    chosen = [router.decide(profile(), snapshot, 0.0).ranked[0].backend for _ in range(4)]
    assert chosen == ["a", "b", "c", "a"]
    router.observe(Observation("a", 0.0, ok=True))


def test_random_spreads_over_backends() -> None:
    router = build_router("random", {}, 1)
    snapshot = fleet(*(state(f"b{i}") for i in range(4)))
    seen = {router.decide(profile(), snapshot, 0.0).ranked[0].backend for _ in range(40)}
    assert seen == {"b0", "b1", "b2", "b3"}


def test_least_loaded_counts_its_own_decisions() -> None:
    router = build_router("least_loaded", {}, 0)
    snapshot = fleet(state("a", in_flight=2), state("b", in_flight=0))
    picks = [router.decide(profile(), snapshot, 0.0).ranked[0].backend for _ in range(4)]
    assert picks[:2] == ["b", "b"] and set(picks[2:]) <= {"a", "b"}
    assert picks.count("a") >= 1


def test_nearest_region_prefers_the_origin_then_lowest_rtt() -> None:
    router = build_router("nearest_region", {}, 0)
    snapshot = fleet(
        state("near", region="r1", rtt_ms=5.0),
        state("far", region="r2", rtt_ms=80.0),
        state("home", region="r3"),
    )
    assert router.decide(profile(), snapshot, 0.0).ranked[0].backend == "near"
    assert router.decide(profile(origin="r3"), snapshot, 0.0).ranked[0].backend == "home"


def test_latency_ewma_tries_unknown_first_then_the_fastest_average() -> None:
    router = build_router("latency_ewma", {"window": 2}, 0)
    snapshot = fleet(state("a"), state("b"))
    assert (
        router.decide(profile(), snapshot, 0.0).ranked[0].reason.startswith("chosen: drawn among 2")
    )
    router.observe(Observation("a", 1.0, ok=True, ttft_ms=100.0))
    assert router.decide(profile(), snapshot, 1.0).ranked[0].backend == "b"
    router.observe(Observation("b", 2.0, ok=True, ttft_ms=300.0))
    router.observe(Observation("b", 2.0, ok=False, error_kind="reset"))  # ignored
    assert router.decide(profile(), snapshot, 2.0).ranked[0].backend == "a"
    router.observe(Observation("a", 3.0, ok=False, error_kind="timeout"))
    assert router.decide(profile(), snapshot, 3.0).ranked[0].backend == "b"
    expired = router.decide(profile(), snapshot, 10_000.0).ranked
    assert [c.score for c in expired] == [0.0, 0.0]  # every sample older than ttl_s


def test_cache_aware_follows_the_prefix_until_imbalanced() -> None:
    router = build_router(
        "cache_aware", {"balance_abs_threshold": 2, "balance_rel_threshold": 1.5}, 0
    )
    hashes = tuple(range(1, 11))
    prof = profile(prompt_tokens=160, prefix_hashes=hashes)
    snapshot = fleet(state("a"), state("b"), state("c"))
    first = router.decide(prof, snapshot, 0.0)
    assert first.ranked[0].reason.endswith("[no good match: smallest tree]")
    owner = first.ranked[0].backend
    second = router.decide(prof, snapshot, 0.0)
    assert second.ranked[0].backend == owner and "cache affinity" in second.ranked[0].reason
    third = router.decide(prof, snapshot, 0.0).ranked[0]  # loads now 2/0/0: not imbalanced
    assert third.backend == owner
    balanced = router.decide(prof, snapshot, 0.0).ranked[0]  # 3/0/0: 3 - 0 > 2, 3 > 1.5 x 0
    assert balanced.backend != owner and "imbalanced" in balanced.reason
    other = router.decide(
        profile(prompt_tokens=160, prefix_hashes=tuple(range(50, 60))), fleet(state(owner)), 0.0
    )
    assert other.ranked[0].backend == owner


def test_llm_d_weighs_prefix_queue_and_kv() -> None:
    router = build_router("llm_d", {}, 0)
    hashes = tuple(range(1, 5))
    snapshot = fleet(
        state("a", running=1, waiting=5, kv_cache_usage=0.6, as_of=0.0),
        state("b", running=1, waiting=0, kv_cache_usage=0.9, as_of=0.0),
        state("c", running=1, waiting=10, kv_cache_usage=0.1, as_of=0.0),
    )
    prof = profile(prompt_tokens=64, prefix_hashes=hashes)
    assert (
        router.explain(profile(), snapshot, 1.0).ranked[0].backend == "b"
    )  # 2*1 + 2*0.1 beats 1.8 and 1.8
    router.scorer.index.record("c", hashes, 0.0)  # type: ignore[attr-defined]
    assert router.explain(prof, snapshot, 1.0).ranked[0].backend == "c"  # 3 + 0 + 1.8
    flat = fleet(state("x"), state("y"))
    assert router.explain(profile(), flat, 1.0).ranked[0].score == -3.0


class Truth:
    def latency_ms(self, backend: str, profile: RequestProfile, now: float) -> float | None:
        return {"a": 50.0, "b": 20.0}.get(backend)


def test_oracle_uses_the_simulators_truth_and_is_simulation_only() -> None:
    router = build_router("oracle", {}, 0, oracle_truth=Truth())
    decision = router.decide(profile(), fleet(state("a"), state("b"), state("c")), 0.0)
    assert [c.backend for c in decision.ranked] == ["b", "a", "c"]
    assert decision.ranked[2].score == float("inf")
    with pytest.raises(RoutingError) as info:
        build_router("oracle", {}, 0)
    assert info.value.kind is ErrorKind.UNKNOWN_POLICY


def test_registry_validates_names_and_params() -> None:
    with pytest.raises(RoutingError, match="not one of") as unknown:
        build_router("fastest", {}, 0)
    assert unknown.value.kind is ErrorKind.UNKNOWN_POLICY
    with pytest.raises(RoutingError, match="margin_ms") as bad:
        build_router("predicted_ttft", {"margin_ms": -1}, 0)
    assert bad.value.kind is ErrorKind.BAD_PARAMS
    with pytest.raises(RoutingError, match="known params"):
        build_router("round_robin", {"typo": 1}, 0)
    assert build_router("predicted_ttft").name == "predicted_ttft"


def test_llm_d_remembers_where_it_sent_a_prefix() -> None:
    router = build_router("llm_d", {}, 0)
    snapshot = fleet(state("a"), state("b"), state("c"))
    prof = profile(prompt_tokens=64, prefix_hashes=(1, 2, 3, 4))
    first = router.decide(prof, snapshot, 0.0).ranked[0].backend
    router.observe(Observation(first, 1.0, ok=True))
    assert router.decide(prof, snapshot, 1.0).ranked[0].backend == first
