"""In-flight counts shared between the simulator's gateways, as the gateway's shared state
carries them (loadtests/sim/shared_in_flight.py): each change of one gateway's open requests
reaches the others after the delay (plus half the round trip between their regions), and their
snapshots carry it as the tier's total and the others' part."""

from __future__ import annotations

from loadtests.sim.fleet import build_fleet
from loadtests.sim.loop import Simulation
from loadtests.sim.shared_in_flight import SharedInFlight
from loadtests.sim.signals import SignalModel
from loadtests.sim.trace import build_trace
from tests.sim.conftest import build, tiny

GATEWAYS = ["near", "near", "far"]


def test_a_change_reaches_every_other_gateway_after_its_delay() -> None:
    scenario = build(tiny(gateways={"near": 2, "far": 1},
                          signals={"shared_in_flight_delay_s": 0.05}))  # fmt: skip
    model = SignalModel(scenario, build_fleet(scenario), GATEWAYS)
    shared = SharedInFlight(scenario, GATEWAYS, model)
    deliveries = shared.published(0, 1, +1, 1.0)
    # Each after the delay and half the round trip: 2 ms within "near", 200 ms to "far".
    assert [round(at, 6) for at, _ in deliveries] == [1.051, 1.15]
    for at, ref in deliveries:
        shared.deliver(at, ref)
    assert shared.pending == 0
    assert [g.others[1] for g in model.gateways] == [0, 1, 1]
    off = SharedInFlight(build(tiny(gateways={"near": 2, "far": 1})), GATEWAYS, model)
    assert not off.active and off.published(0, 1, +1, 1.0) == []


def test_the_snapshot_carries_the_others_part_of_the_tier() -> None:
    scenario = build(tiny(gateways={"near": 2}, signals={"shared_in_flight_delay_s": 0.05}))
    backends = build_fleet(scenario)
    model = SignalModel(scenario, backends, ["near", "near"])
    model.others_moved(1, 0, +1)  # before any snapshot: the first one carries it
    model.scrape(0.0)
    model.rebuild(0.0)
    name = backends[0].name
    model.gateways[1].sent(0, 0.5)
    model.others_moved(1, 0, +2)
    state = model.gateways[1].snapshot.backends[name]
    assert (state.in_flight, state.others_in_flight) == (1 + 3, 3)
    assert model.gateways[0].snapshot.backends[name].others_in_flight == 0
    plain = SignalModel(build(tiny(gateways={"near": 2})), backends, ["near", "near"])
    plain.rebuild(0.0)
    assert plain.gateways[0].snapshot.backends[name].others_in_flight is None


def test_every_change_is_delivered_and_the_counts_return_to_zero() -> None:
    raw = tiny(gateways={"near": 2}, signals={"shared_in_flight_delay_s": 0.05})
    scenario = build(raw)
    simulation = Simulation(scenario, build_trace(scenario, None), "predicted_ttft")
    simulation.run()
    assert simulation._flights.pending == 0
    assert all(count == 0 for g in simulation.signals.gateways for count in g.others)
