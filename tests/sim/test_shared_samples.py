"""Learning shared between the simulator's gateways of one region, as the gateway's shared
state carries it (loadtests/sim/shared_samples.py): a first token one gateway learned from
teaches the others of its region after the configured delay, and a slow path is left sooner."""

from __future__ import annotations

import numpy as np

from loadtests.sim.fleet import build_fleet
from loadtests.sim.loop import simulate
from loadtests.sim.shared_samples import SharedSamples
from loadtests.sim.signals import SignalModel
from loadtests.sim.trace import build_trace
from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from routing.types import FirstToken, RequestProfile
from tests.sim.conftest import build, tiny

GATEWAYS = ["near", "near", "far"]
TERMS = {"rtt": 2.0, "queue": 0.0, "prefill": 20.0, "step": 10.0, "bias": 0.0}


def _primed(policy: str) -> list[PipelineRouter]:
    """Routers that have seen a fleet (a sample is re-expressed against one)."""
    scenario = build(tiny(gateways={"near": 2, "far": 1}))
    model = SignalModel(scenario, build_fleet(scenario), GATEWAYS)
    model.probe(0.0)
    model.scrape(0.0)
    model.rebuild(0.0)
    routers = [build_router(policy, {}, k) for k in range(3)]
    assert all(isinstance(router, PipelineRouter) for router in routers)
    for router, gateway in zip(routers, model.gateways, strict=True):
        router.explain(RequestProfile(model=scenario.model), gateway.snapshot, 0.0)
    return routers


def test_a_sample_reaches_the_gateways_of_its_region_after_the_delay() -> None:
    scenario = build(tiny(gateways={"near": 2, "far": 1},
                          signals={"shared_learning_delay_s": 0.05}))  # fmt: skip
    routers = _primed("predicted_ttft")
    shared = SharedSamples(scenario, GATEWAYS, routers)
    first = FirstToken("local-0", 1.0, 500.0, TERMS, predicted_ttft_ms=32.0)
    deliveries = shared.published(0, first, 1.0)
    assert [at for at, _ in deliveries] == [1.05]  # the other "near" gateway, not "far"
    for at, ref in deliveries:
        shared.deliver(at, ref)
    assert shared.pending == 0
    learners = [r.scorer.learner for r in routers]  # type: ignore[attr-defined]
    assert learners[1].estimate("local-0") is not None  # taught
    assert learners[2].estimate("local-0") is None  # another region: not
    assert learners[0].estimate("local-0") is None  # the sender learns by itself, not here


def test_off_by_default_and_for_policies_that_learn_nothing() -> None:
    first = FirstToken("local-0", 1.0, 500.0, TERMS)
    off = build(tiny(gateways={"near": 2, "far": 1}))
    assert SharedSamples(off, GATEWAYS, _primed("predicted_ttft")).published(0, first, 1.0) == []
    on = build(tiny(gateways={"near": 2, "far": 1}, signals={"shared_learning_delay_s": 0.0}))
    plain = SharedSamples(on, GATEWAYS, _primed("round_robin"))
    assert not plain.active and plain.published(0, first, 1.0) == []
    shared = SharedSamples(on, GATEWAYS, _primed("predicted_ttft"))
    assert shared.published(0, FirstToken("local-0", 1.0, 500.0), 1.0) == []  # no terms
    assert shared.published(0, FirstToken("nowhere", 1.0, 500.0, TERMS), 1.0) == []


def test_gateways_that_learn_together_leave_a_slow_path_sooner() -> None:
    """Two gateways in one region; local-0's path +300 ms from 10 s, probes staying fast.
    Each alone needs its own evidence; learning together, fewer requests pay the slow path."""
    raw = tiny(
        gateways={"near": 2}, duration_s=30, clients={"users": {"region": "near", "rate_rps": 8}},
        events=[{"kind": "path_delay", "backend": "local-0", "start_s": 10, "end_s": 1000,
                 "extra_ms": 300, "probes_see": False}],
    )  # fmt: skip
    paid = []
    for delay in (None, 0.05):
        scenario = build({**raw, "signals": {"shared_learning_delay_s": delay}})
        trace = build_trace(scenario, None)
        results = simulate(scenario, trace, "predicted_ttft").results
        slow = (results.ttft_ms >= 300.0) & (results.arrived_at >= 10.0)
        paid.append(int(np.count_nonzero(slow)))
    assert paid[1] < paid[0]  # 5 against 9 (deterministic: the seed is fixed)
