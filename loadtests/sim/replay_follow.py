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

from loadtests.sim.loop import Simulation
from loadtests.sim.replay_trace import ReplayTrace
from loadtests.sim.results import PolicyRun
from loadtests.sim.scenario import Scenario
from routing.pipeline.router import PipelineRouter
from routing.types import Decision, FleetSnapshot, RequestProfile


class FollowRecorded:
    """``inner`` follows ``routes[i]`` for the i-th decision while its arrival is before
    ``until``; decisions come in arrival order, one per request (the simulation loop's)."""

    def __init__(
        self, inner: PipelineRouter, routes: Sequence[tuple[float, str | None]], until: float
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._routes: Iterator[tuple[float, str | None]] = iter(routes)
        self._until = until
        self.followed = 0
        # What the loop tells the router goes to ``inner`` unchanged (bound, not re-declared).
        self.observe = inner.observe
        self.observe_first_token = inner.observe_first_token
        self.release = inner.release

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        at, backend = next(self._routes, (now, None))
        if backend is None or at >= self._until:
            return self.inner.decide(profile, fleet, now)
        self.followed += 1
        return self.inner.follow(profile, fleet, now, backend)


def replay_following(
    scenario: Scenario, trace: ReplayTrace, policy: str, follow_s: float
) -> PolicyRun:
    """``policy`` on ``trace``, following the recorded routes for the first ``follow_s``
    seconds of arrivals (0: not at all). A policy that is not a pipeline router (the oracle)
    or a trace without recorded routes is replayed as it is."""
    simulation = Simulation(scenario, trace, policy)
    first = trace.file.lines[0].t_s if trace.file.lines else 0.0
    routes = [
        (line.t_s - first, line.recorded.backend if line.recorded is not None else None)
        for line in trace.file.lines
    ]
    router = simulation.routers[0]
    if follow_s > 0 and isinstance(router, PipelineRouter) and len(simulation.routers) == 1:
        simulation.routers[0] = FollowRecorded(router, routes, follow_s)
    return simulation.run()
