"""Other gateways' arrivals between scrapes, as the simulator's gateways read them off the
engines' prefix-cache counters (routing.arrivals)."""

from __future__ import annotations

import pytest

from loadtests.emulator.engine import SequenceRequest
from loadtests.sim.fleet import SimBackend, build_fleet
from loadtests.sim.signals import SignalModel
from tests.sim.conftest import build, tiny


def _two_gateways(on: bool) -> tuple[SignalModel, list[SimBackend]]:
    """Two gateways in one region, probed and scraped at zero."""
    scenario = build(tiny(gateways={"near": 2}, signals={"engine_counters": on}))
    backends = build_fleet(scenario)
    model = SignalModel(scenario, backends, ["near", "near"])
    model.probe(0.0)
    model.scrape(0.0)
    return model, backends


def _model(on: bool) -> tuple[SignalModel, list[float]]:
    model, backends = _two_gateways(on)
    engine = backends[0].engine
    # Gateway 0 sends 3 requests of 1,000 tokens, gateway 1 one; none of them cached.
    for k, gateway in enumerate((0, 0, 0, 1)):
        model.gateways[gateway].sent(0, 0.1, 1_000)
        engine.submit(SequenceRequest(k, 1_000, 5, ()), 0.1)
    engine.advance(2.0)
    model.scrape(2.0)
    model.rebuild(2.0)
    name = backends[0].name
    states = [g.snapshot.backends[name] for g in model.gateways]
    rates = [s.others_uncached_per_s for s in states] + [s.others_requests_per_s for s in states]
    return model, [r if r is not None else -1.0 for r in rates]


def test_each_gateway_sees_the_others_uncached_tokens_per_second() -> None:
    _, (first, second, first_rps, second_rps) = _model(True)
    assert first == pytest.approx(1_000 / 2.0)  # gateway 1's request, over the 2 s interval
    assert second == pytest.approx(3_000 / 2.0)
    assert (first_rps, second_rps) == pytest.approx((0.5, 1.5))  # ...and requests


def test_off_by_default_the_snapshot_carries_no_rate() -> None:
    _, rates = _model(False)
    assert rates == [-1.0] * 4


def test_a_gateways_own_cache_hits_are_not_taken_for_the_others() -> None:
    # Gateway 0 sends the same 1,024-token prompt twice: the second is found cached (all but
    # its last token, which is always computed), and its answer says so before the scrape.
    # Gateway 1 sends one uncached prompt. Each sees only the other's uncached tokens.
    model, backends = _two_gateways(True)
    engine, shared, other = backends[0].engine, tuple(range(64)), tuple(range(100, 164))
    for k, (gateway, hashes, at) in enumerate(
        ((0, shared, 0.1), (1, other, 0.2), (0, shared, 1.0))
    ):
        model.gateways[gateway].sent(0, at, 1_024)
        engine.submit(SequenceRequest(k, 1_024, 2, hashes), at)
    engine.advance(1.9)
    hits = engine.counters(1.9).prefix_hits_tokens
    assert hits == 1_023
    model.gateways[0].done(0, 1.9, hits)
    model.scrape(2.0)
    model.rebuild(2.0)
    name = backends[0].name
    first, second = (g.snapshot.backends[name].others_uncached_per_s for g in model.gateways)
    assert first == pytest.approx(1_024 / 2.0)
    assert second == pytest.approx((2 * 1_024 - hits) / 2.0)
