"""Prefix affinity shared between the simulator's gateways, as the gateway's shared state
carries it (loadtests/sim/shared_prefixes.py): a decision's prompt blocks reach the other
gateways' routers after the configured delay plus half the trip between their regions."""

from __future__ import annotations

import pytest

from loadtests.sim.fleet import build_fleet
from loadtests.sim.loop import simulate
from loadtests.sim.shared_prefixes import SharedPrefixes
from loadtests.sim.signals import SignalModel
from loadtests.sim.trace import build_trace
from routing.policies import build_router
from routing.types import Decision, RequestProfile
from tests.sim.conftest import build, tiny

CHAIN = tuple(range(500, 525))  # 25 blocks of 16 tokens
GATEWAYS = ["near", "far"]


def _cached_on(decision: Decision, backend: str) -> int:
    return next(c.cached_tokens for c in decision.ranked if c.backend == backend)


def test_a_decision_reaches_the_other_gateway_after_the_delay_and_half_the_trip() -> None:
    scenario = build(tiny(gateways={"near": 1, "far": 1},
                          signals={"shared_prefix_delay_s": 0.05}))  # fmt: skip
    model = SignalModel(scenario, build_fleet(scenario), GATEWAYS)
    model.probe(0.0)
    model.scrape(0.0)
    model.rebuild(0.0)
    routers = [build_router("predicted_ttft", {"max_ranked": 4}, k) for k in range(2)]
    shared = SharedPrefixes(scenario, GATEWAYS, routers)
    profile = RequestProfile(model=scenario.model, prompt_tokens=420, prefix_hashes=CHAIN)
    far = model.gateways[1].snapshot

    deliveries = shared.published(0, "local-0", CHAIN, 1.0)
    assert [at for at, _ in deliveries] == pytest.approx([1.0 + 0.05 + 0.1])  # 200 ms apart
    assert _cached_on(routers[1].explain(profile, far, 1.1), "local-0") == 0
    for at, ref in deliveries:
        shared.deliver(at, ref)
    assert _cached_on(routers[1].explain(profile, far, 1.2), "local-0") == 16 * len(CHAIN)
    assert _cached_on(routers[0].explain(profile, model.gateways[0].snapshot, 1.2), "local-0") == 0


def test_off_by_default_nothing_is_published() -> None:
    scenario = build(tiny(gateways={"near": 1, "far": 1}))
    routers = [build_router("predicted_ttft", {}, k) for k in range(2)]
    assert SharedPrefixes(scenario, GATEWAYS, routers).published(0, "local-0", CHAIN, 1.0) == []


def test_a_policy_without_a_prefix_index_takes_nothing() -> None:
    scenario = build(tiny(gateways={"near": 1, "far": 1},
                          signals={"shared_prefix_delay_s": 0.0}))  # fmt: skip
    routers = [build_router("round_robin", {}, k) for k in range(2)]
    shared = SharedPrefixes(scenario, GATEWAYS, routers)
    ((at, ref),) = shared.published(1, "local-0", CHAIN, 2.0)
    shared.deliver(at, ref)  # no index to record into: nothing happens, nothing fails
    assert shared.pending == 0


def test_gateways_sharing_their_prompts_find_more_of_them_cached() -> None:
    # Two gateways in one region route one tenant's system prompts: sharing, the second
    # follows the first's placements instead of warming a second copy.
    raw = tiny(gateways={"near": 2}, clients={"users": {"region": "near", "rate_rps": 6}})
    hits = []
    for delay in (None, 0.05):
        scenario = build({**raw, "signals": {"shared_prefix_delay_s": delay}})
        trace = build_trace(scenario, None)
        results = simulate(scenario, trace, "predicted_ttft").results
        hits.append(results.cached_tokens.sum() / results.prompt_tokens.sum())
    assert hits[1] > hits[0]
