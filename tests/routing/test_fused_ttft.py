"""The fused predicted_ttft path decides exactly as the generic pipeline does.

Two routers built alike are driven through the same operations over deterministic fleets; one
decides with ``decide`` (fused whenever it may), the other always through the generic
``PipelineRouter._decide``. Every decision must be equal field for field, and so must what the
routers decide afterwards (the state they leave is the same).
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from routing.pipeline.filters import default_filters
from routing.pipeline.pickers import MarginPicker
from routing.policies import build_router
from routing.policies.fused_ttft import FusedTTFTRouter
from routing.policies.predicted_ttft import PredictedTTFTParams, PredictedTTFTScorer
from routing.types import (
    BackendKind,
    BackendState,
    Decision,
    FleetSnapshot,
    LatencyClass,
    Observation,
    RequestProfile,
)
from tests.routing.routing_fixtures import MODEL, spec

SPECS = [
    spec("d0", max_num_seqs=4),
    spec("d1", "r2", max_num_seqs=8, prefill_tokens_per_s=5000.0),
    spec("s2", kind=BackendKind.SERVERLESS, cold_start_ms=3000.0, idle_timeout_s=20.0),
    spec("d3", "r3", max_num_seqs=2, models=frozenset({MODEL, "other"})),
    spec("g4", "r2", kind=BackendKind.GATEWAY),
]
HASHES = tuple(range(500, 532))


def _state(i: int, seed: int, now: float) -> BackendState:
    metrics = seed % 3 != 0
    return BackendState(
        spec=SPECS[i],
        healthy=seed % 11 != 5,
        circuit_open=seed % 13 == 7,
        ejected_until=now + 5.0 if seed % 17 == 3 else None,
        in_flight=seed % 7,
        running=seed % 9 if metrics else None,
        waiting=(seed % 4) * (6 if seed % 19 == 1 else 1) if metrics else None,
        rtt_ms=float(seed % 50) if seed % 2 else None,
        last_traffic_at=now - seed % 30 if seed % 5 else None,
        downstream_ttft_ms={MODEL: 40.0} if seed % 2 else {"other": 10.0},
        as_of=now - (seed % 4),
    )


def _profile(i: int, flags: int) -> RequestProfile:
    return RequestProfile(
        model="other" if flags % 7 == 6 else MODEL,
        prompt_tokens=16 * (i + 1) * (40 if flags % 5 == 4 else 1),
        prefix_hashes=HASHES[: i + 1],
        latency_class=LatencyClass.LONG_FORM if flags % 2 else LatencyClass.INTERACTIVE,
        exclude=frozenset({"d1"}) if flags % 3 == 2 else frozenset(),
        allowed_regions=frozenset({"r1", "r3"}) if flags % 4 == 3 else None,
        deadline_s=0.5 if flags % 6 == 5 else None,
    )


operation = st.one_of(
    st.tuples(st.just("snapshot"), st.integers(0, 4), st.integers(0, 10_000)),
    st.tuples(st.just("gateways"), st.integers(0, 1), st.integers(0, 0)),
    st.tuples(st.just("release"), st.integers(0, 4), st.integers(0, 0)),
    st.tuples(st.just("observe"), st.integers(0, 4), st.integers(1, 500)),
    st.tuples(st.just("decide"), st.integers(0, 31), st.integers(0, 83)),
)


def _comparable(decision: Decision) -> list[Any]:
    return [
        (c.backend, c.score, c.predicted_ttft_ms, c.predicted_ttft_p90_ms, dict(c.terms_ms),
         dict(c.term_age_s), dict(c.term_spread_ms), c.reason, c.predicted_e2e_ms,
         c.cached_tokens)
        for c in decision.ranked
    ] + [decision.policy, decision.rejected, decision.omitted, decision.note, decision.explored]  # fmt: skip


def _fleet(states: dict[str, BackendState], gateways: bool) -> FleetSnapshot:
    kept = {name: s for name, s in states.items() if gateways or s.spec.kind != BackendKind.GATEWAY}
    return FleetSnapshot(kept, gateway_region="r1", region_rtt_ms={"r1": 1.0, "r2": 30.0})


def run(ops: list[tuple[str, int, int]]) -> FusedTTFTRouter:
    params = {"max_ranked": 3, "explore_share": 0.05, "explore_recheck_s": 0.6}
    fused = build_router("predicted_ttft", params, 5)
    generic = build_router("predicted_ttft", params, 5)
    assert isinstance(fused, FusedTTFTRouter)
    now = 100.0
    states = {s.name: _state(i, 100 + i, now) for i, s in enumerate(SPECS)}
    gateways = False
    snapshot = _fleet(states, gateways)
    for kind, i, value in ops:
        now += 0.25
        backend = SPECS[i % len(SPECS)].name
        if kind == "snapshot":
            states[backend] = _state(i, value, now)
        if kind == "gateways":
            gateways = bool(i)
        if kind in {"snapshot", "gateways"}:
            snapshot = _fleet(states, gateways)
        for router in (fused, generic):
            if kind == "release":
                router.release(backend)
            elif kind == "observe":
                router.observe(Observation(backend, now, ok=True, ttft_ms=float(value), itl_ms=10.0,
                    output_tokens=5, prefix_hashes=HASHES[:4],
                    predicted_terms_ms={"queue": 5.0, "prefill": 1.0}))  # fmt: skip
        if kind == "decide":
            prof = _profile(i, value)
            one = _comparable(fused.decide(prof, snapshot, now))
            other = _comparable(generic._decide(prof, snapshot, now, commit=True))
            assert one == other
    final = _profile(3, 0)
    assert _comparable(fused.explain(final, snapshot, now)) == _comparable(
        generic.explain(final, snapshot, now)
    )
    return fused


@settings(max_examples=60, deadline=None, derandomize=True)
@given(ops=st.lists(operation, min_size=1, max_size=40))
@example(ops=[("decide", 3, 0)] * 30)  # fused every time: explorations spent in step
@example(ops=[("gateways", 1, 0), ("decide", 3, 0), ("decide", 3, 2), ("decide", 3, 6)])
@example(ops=[("snapshot", 0, 5), ("snapshot", 1, 7), ("decide", 2, 0), ("decide", 2, 3)])
# each dynamic filter rejecting alone: circuit open, ejected, unhealthy, no capacity left
@example(ops=[("snapshot", 0, 7), ("decide", 3, 0), ("snapshot", 0, 100), ("decide", 3, 0)])
@example(ops=[("snapshot", 0, 3), ("decide", 3, 0), ("snapshot", 0, 5), ("decide", 3, 0)])
@example(ops=[("snapshot", 3, 58), ("decide", 3, 0), ("decide", 3, 1)])
def test_the_fused_path_decides_as_the_generic_pipeline(ops: list[tuple[str, int, int]]) -> None:
    run(ops)


def test_the_fused_path_takes_the_common_request_and_steps_aside_for_the_rest() -> None:
    plain = [("decide", 3, 0)] * 5
    assert run(plain).fused == 5
    # an exclude list, a dynamic rejection (unhealthy d0), a gateway in the fleet, a model
    # nobody serves after the static filters: each goes the generic way
    for ops in (
        [("decide", 3, 2)],
        [("snapshot", 0, 5), ("decide", 3, 0)],
        [("gateways", 1, 0), ("decide", 3, 0)],
    ):
        assert run(ops).fused == 0
    no_model = build_router("predicted_ttft", {}, 1)
    assert isinstance(no_model, FusedTTFTRouter)
    snapshot = _fleet({"d0": _state(0, 0, 100.0)}, False)
    decision = no_model.decide(RequestProfile(model="other"), snapshot, 100.0)
    assert decision.chosen is None and no_model.fused == 0


def test_other_filters_than_the_default_ones_always_take_the_generic_path() -> None:
    params = PredictedTTFTParams()
    router = FusedTTFTRouter(
        "predicted_ttft",
        default_filters()[:-1],  # no capacity filter: the fused mask would not stand for these
        PredictedTTFTScorer(params),
        MarginPicker(params.margin_ms, params.margin_rel),
        1,
    )
    snapshot = _fleet({"d0": _state(0, 1, 100.0)}, False)
    assert router.decide(RequestProfile(model=MODEL), snapshot, 100.0).chosen is not None
    assert router.capacity is None and router.fused == 0
