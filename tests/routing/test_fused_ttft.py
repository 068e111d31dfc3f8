"""The fused predicted_ttft path, vector and scalar, decides exactly as the generic pipeline.

Two routers built alike are driven through the same operations over deterministic fleets; one
decides with ``decide`` (fused whenever it may: with numpy, or, for a fleet of up to
``scalar_max`` backends, with Python floats), the other always through the generic
``PipelineRouter._decide``. Every decision must be equal field for field, and so must what the
routers decide afterwards (the state they leave is the same). Each property runs twice: the
fused router never scalar, and always scalar whatever the fleet's size.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from routing.pipeline.filters import default_filters
from routing.pipeline.pickers import MarginPicker
from routing.policies import build_router
from routing.policies.fused_ttft import FusedTTFTRouter
from routing.policies.predicted_ttft import PredictedTTFTScorer
from routing.policies.predicted_ttft_params import PredictedTTFTParams
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
        others_uncached_per_s=float(seed % 23) * 100.0 if seed % 23 > 19 else None,
        others_requests_per_s=float(seed % 29) if seed % 29 > 25 else None,
    )


def _profile(i: int, flags: int) -> RequestProfile:
    return RequestProfile(
        model="other" if flags % 7 == 6 else MODEL,
        prompt_tokens=16 * (i + 1) * (40 if flags % 5 == 4 else 1),
        prefix_hashes=HASHES[: i + 1],
        latency_class=LatencyClass.LONG_FORM if flags % 2 else LatencyClass.INTERACTIVE,
        exclude=frozenset({"d1"}) if flags % 3 == 2 else frozenset(),
        allowed_regions=frozenset({"r1", "r3"}) if flags % 4 == 3 else None,
        deadline_s=0.5 if flags % 6 == 5 or flags % 10 == 9 else None,
        region_penalty_ms={"r1": 15.0, "r2": 5.0} if flags % 8 == 7 else {},
    )


operation = st.one_of(
    st.tuples(st.just("snapshot"), st.integers(0, 4), st.integers(0, 10_000)),
    st.tuples(st.just("gateways"), st.integers(0, 1), st.integers(0, 0)),
    st.tuples(st.just("release"), st.integers(0, 4), st.integers(0, 0)),
    st.tuples(st.just("observe"), st.integers(0, 4), st.integers(1, 500)),
    st.tuples(st.just("decide"), st.integers(0, 31), st.integers(0, 167)),
    st.tuples(st.just("layout"), st.integers(1, 5), st.integers(0, 0)),
)
# The second weighs decode time in interactive scores (routing.predictor's ``full``).
PARAMS = (
    {"max_ranked": 3, "explore_share": 0.05, "explore_recheck_s": 0.6},
    {"max_ranked": 2, "explore_share": 0.05, "interactive_decode_weight": 0.5,
     "others_decode_weight": 0.25, "interactive_ttft_slack_ms": 30.0,
     "others_prefill_weight": 0.5},
)  # fmt: skip


def _comparable(decision: Decision) -> list[Any]:
    return [
        (c.backend, c.score, c.predicted_ttft_ms, c.predicted_ttft_p90_ms, dict(c.terms_ms),
         dict(c.term_age_s), dict(c.term_spread_ms), c.reason, c.predicted_e2e_ms,
         c.cached_tokens)
        for c in decision.ranked
    ] + [decision.policy, decision.rejected, decision.omitted, decision.note, decision.explored]  # fmt: skip


def _fleet(states: dict[str, BackendState], gateways: bool, size: int = 5) -> FleetSnapshot:
    kept = {
        name: s
        for name, s in list(states.items())[:size]
        if gateways or s.spec.kind != BackendKind.GATEWAY
    }
    return FleetSnapshot(kept, gateway_region="r1", region_rtt_ms={"r1": 1.0, "r2": 30.0})


def run(
    ops: list[tuple[str, int, int]], scalar_max: int = 0, params: dict[str, Any] = PARAMS[0]
) -> FusedTTFTRouter:
    fused = build_router("predicted_ttft", params, 5)
    generic = build_router("predicted_ttft", params, 5)
    assert isinstance(fused, FusedTTFTRouter)
    fused.scalar_max = scalar_max
    now = 100.0
    states = {s.name: _state(i, 100 + i, now) for i, s in enumerate(SPECS)}
    gateways, size = False, len(SPECS)
    snapshot = _fleet(states, gateways)
    for kind, i, value in ops:
        now += 0.25
        backend = SPECS[i % len(SPECS)].name
        if kind == "snapshot":
            states[backend] = _state(i, value, now)
        if kind == "gateways":
            gateways = bool(i)
        if kind == "layout":  # the first ``i`` backends only: a new view
            size = i
        if kind in {"snapshot", "gateways", "layout"}:
            snapshot = _fleet(states, gateways, size)
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


@pytest.mark.parametrize("scalar_max", [0, 64], ids=["vector", "scalar"])
@settings(max_examples=60, deadline=None, derandomize=True)
@given(ops=st.lists(operation, min_size=1, max_size=40), params=st.sampled_from(PARAMS))
@example(
    ops=[("decide", 3, 0)] * 30, params=PARAMS[0]
)  # fused every time: explorations spent in step
@example(
    ops=[("gateways", 1, 0), ("decide", 3, 0), ("decide", 3, 2), ("decide", 3, 6)], params=PARAMS[0]
)
@example(
    ops=[("snapshot", 0, 5), ("snapshot", 1, 7), ("decide", 2, 0), ("decide", 2, 3)],
    params=PARAMS[0],
)
# each dynamic filter rejecting alone: circuit open, ejected, unhealthy, no capacity left
@example(
    ops=[("snapshot", 0, 7), ("decide", 3, 0), ("snapshot", 0, 100), ("decide", 3, 0)],
    params=PARAMS[0],
)
@example(
    ops=[("snapshot", 0, 3), ("decide", 3, 0), ("snapshot", 0, 5), ("decide", 3, 0)],
    params=PARAMS[0],
)
@example(ops=[("snapshot", 3, 58), ("decide", 3, 0), ("decide", 3, 1)], params=PARAMS[0])
# stale evidence on three rows, two worth exploring (the older one goes), long-form; then
# the same with deadlines (no exclude list: fused)
@example(
    ops=[("observe", 0, 30), ("observe", 1, 30), ("observe", 3, 30)] + [("decide", 3, 1)] * 30,
    params=PARAMS[0],
)
@example(
    ops=[("observe", 0, 30), ("observe", 1, 30), ("observe", 3, 30)] + [("decide", 3, 9)] * 30,
    params=PARAMS[0],
)
# a keep-warm credit due on the serverless row while our request there is still open
@example(ops=[("decide", 3, 0)] + [("release", 0, 0)] * 44 + [("decide", 3, 0)], params=PARAMS[0])
def test_the_fused_path_decides_as_the_generic_pipeline(
    scalar_max: int, ops: list[tuple[str, int, int]], params: dict[str, Any]
) -> None:
    run(ops, scalar_max, params)


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


def test_small_fleets_take_the_scalar_path_and_large_ones_the_vector_path() -> None:
    plain = [("decide", 3, 0)] * 4
    small = run(plain, scalar_max=8)
    assert small.scalar == small.fused == 4
    large = run(plain, scalar_max=3)  # four backends without the gateway: above it
    assert large.scalar == 0 and large.fused == 4
    # a dynamic rejection steps aside from the scalar path as from the vector one
    rejected = run([("snapshot", 0, 5), ("decide", 3, 0)], scalar_max=8)
    assert rejected.scalar == rejected.fused == 0


def _sequence(seed: int) -> list[tuple[str, int, int]]:
    """A longer operation sequence than hypothesis tends to draw: old evidence to explore,
    idle serverless backends to credit or wake, others' arrivals, placements."""
    rng = random.Random(seed)
    ops: list[tuple[str, int, int]] = []
    for _ in range(rng.randint(5, 40)):
        kind = rng.choices(KINDS, WEIGHTS)[0]
        low, high = BOUNDS[kind]
        ops.append((kind, rng.randint(low, high), rng.randint(0, 10_000)))
    return ops


KINDS = ("snapshot", "gateways", "release", "observe", "decide", "layout")
WEIGHTS = (3.0, 0.3, 1.0, 2.0, 6.0, 0.3)
BOUNDS = {"snapshot": (0, 4), "gateways": (0, 1), "release": (0, 4), "observe": (0, 4),
          "decide": (0, 31), "layout": (1, 5)}  # fmt: skip


@pytest.mark.parametrize("scalar_max", [0, 64], ids=["vector", "scalar"])
def test_the_fused_path_decides_as_the_generic_pipeline_over_long_sequences(
    scalar_max: int,
) -> None:
    for seed in range(300):
        run(_sequence(seed), scalar_max, PARAMS[seed % 2])
