"""Other gateways' arrivals between scrapes, as the simulator's gateways read them off the
engines' prefix-cache counters (routing.arrivals)."""

from __future__ import annotations

import pytest

from loadtests.emulator.engine import SequenceRequest
from loadtests.sim.fleet import build_fleet
from loadtests.sim.signals import SignalModel
from tests.sim.conftest import build, tiny


def _model(on: bool) -> tuple[SignalModel, list[float]]:
    raw = tiny(gateways={"near": 2}, signals={"engine_counters": on})
    scenario = build(raw)
    backends = build_fleet(scenario)
    model = SignalModel(scenario, backends, ["near", "near"])
    model.probe(0.0)
    model.scrape(0.0)
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
