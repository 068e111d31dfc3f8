"""A replay that starts where the recording's router was: for its first ``follow_s`` seconds
the replay's router follows the recorded routes (``PipelineRouter.follow``: it commits to the
backend the recording chose and learns from the outcome as if it had chosen it), then decides
for itself.

Why: an adaptive policy's split depends on what its router learned (per-backend offsets, ITL,
which backend holds which prefix) and one different early decision moves a session's prefix
and every later turn with it. A replay from cold priors is one possible history of the same
traffic, not the recorded one; following the recording through a warm-up window hands the
replay's router the recording's learned state, and the window after it is the comparison.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from loadtests.sim.loop import Simulation
from loadtests.sim.replay_trace import Recorded, ReplayTrace
from loadtests.sim.results import PolicyRun
from loadtests.sim.scenario import Scenario
from routing.pipeline.router import PipelineRouter
from routing.types import Decision, FirstToken, FleetSnapshot, RequestProfile

Key = tuple[str, int, float | None]  # backend, prompt tokens, predicted TTFT: one request


class FollowRecorded:
    """``inner`` follows ``recorded[i]`` for the i-th decision while its arrival (``at``, s
    from the first) is before ``until``; decisions come in arrival order, one per request (the
    simulation loop's). A followed request's first token teaches ``inner`` the *recorded* TTFT
    and cached tokens, not the simulated ones: its learned offsets and rates are then the
    recording router's, not what the simulated engines would have taught it."""

    def __init__(
        self, inner: PipelineRouter, recorded: Sequence[tuple[float, Recorded | None]], until: float
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._recorded: Iterator[tuple[float, Recorded | None]] = iter(recorded)
        self._until = until
        self._learn: dict[Key, Recorded] = {}
        self.followed = 0
        # What the loop tells the router at the end goes to ``inner`` unchanged.
        self.observe = inner.observe
        self.release = inner.release

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        at, recorded = next(self._recorded, (now, None))
        if recorded is None or recorded.backend is None or at >= self._until:
            return self.inner.decide(profile, fleet, now)
        self.followed += 1
        decision = self.inner.follow(profile, fleet, now, recorded.backend)
        chosen = decision.chosen
        if chosen is not None and chosen.backend == recorded.backend and recorded.ttft_ms:
            self._learn[(chosen.backend, profile.prompt_tokens, chosen.predicted_ttft_ms)] = (
                recorded
            )
        return decision

    def observe_first_token(self, first: FirstToken) -> None:
        key = (first.backend, first.prompt_tokens, first.predicted_ttft_ms)
        recorded = self._learn.pop(key, None)
        if recorded is not None and recorded.ttft_ms is not None:
            cached = first.cached_tokens
            if recorded.cached_tokens is not None:
                cached = recorded.cached_tokens
            first = replace(first, ttft_ms=recorded.ttft_ms, cached_tokens=cached)
        self.inner.observe_first_token(first)


def replay_following(
    scenario: Scenario, trace: ReplayTrace, policy: str, follow_s: float
) -> PolicyRun:
    """``policy`` on ``trace``, following the recorded routes for the first ``follow_s``
    seconds of arrivals (0: not at all). A policy that is not a pipeline router (the oracle)
    or a trace without recorded routes is replayed as it is."""
    simulation = Simulation(scenario, trace, policy)
    first = trace.file.lines[0].t_s if trace.file.lines else 0.0
    recorded = [(line.t_s - first, line.recorded) for line in trace.file.lines]
    router = simulation.routers[0]
    if follow_s > 0 and isinstance(router, PipelineRouter) and len(simulation.routers) == 1:
        simulation.routers[0] = FollowRecorded(router, recorded, follow_s)
    return simulation.run()
