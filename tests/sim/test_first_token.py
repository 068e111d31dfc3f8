"""The simulator tells the router each TTFT at the first token, as the gateway's relay does."""

from __future__ import annotations

from loadtests.sim.loop import Simulation
from loadtests.sim.trace import build_trace
from routing.pipeline.router import PipelineRouter
from routing.types import Decision, FirstToken, FleetSnapshot, Observation, RequestProfile
from tests.sim.conftest import build, tiny


class Recording:
    """The real router, with a log of what the simulator told it and when."""

    def __init__(self, inner: PipelineRouter) -> None:
        self.inner = inner
        self.name = inner.name
        self.first: list[tuple[str, float, float]] = []
        self.ends: list[Observation] = []

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        return self.inner.decide(profile, fleet, now)

    def observe(self, observation: Observation) -> None:
        self.ends.append(observation)
        self.inner.observe(observation)

    def observe_first_token(self, first: FirstToken) -> None:
        self.first.append((first.backend, first.at, first.ttft_ms))
        self.inner.observe_first_token(first)


def test_the_router_learns_each_ttft_at_its_first_token_and_not_again_at_the_end() -> None:
    scenario = build(tiny(workloads={"chat": {
        "tenants": 2, "system_prompts": 1, "prefix_tokens": [200, 300],
        "question_tokens": [10, 20], "output_tokens": [50, 80],
    }}))  # fmt: skip
    sim = Simulation(scenario, build_trace(scenario, requests=40), "predicted_ttft")
    router = sim.routers[0]
    assert isinstance(router, PipelineRouter)
    recording = Recording(router)
    sim.routers[0] = recording
    run = sim.run()
    assert len(recording.first) == len(recording.ends) == 40
    ends = sorted(recording.ends, key=lambda o: o.at)
    assert all(o.first_token_observed for o in ends)
    # Each first token is learned before the stream ends (50+ output tokens later), with the
    # TTFT the results record.
    assert sorted(ttft for _, _, ttft in recording.first) == sorted(run.results.ttft_ms.tolist())
    firsts = sorted(at for _, at, _ in recording.first)
    assert all(first < end.at for first, end in zip(firsts, ends, strict=True))
