"""A replay that starts where the recording's router was: for a warm-up the replay's router
follows the recorded routes (``PipelineRouter.follow``: it commits to the backend the
recording chose and learns from the outcome as if it had chosen it), then decides for itself.

Why: an adaptive policy's split depends on what its router learned (per-backend offsets, ITL,
which backend holds which prefix) and one different early decision moves a session's prefix
and every later turn with it. A replay from cold priors is one possible history of the same
traffic, not the recorded one; following the recording through a warm-up hands the replay's
router the recording's learned state, and the requests after it are the comparison.

The warm-up ends after a number of seconds (``Follow.seconds``) or, more reliably, once the
router has learned ``Follow.samples`` recorded first tokens on every backend the recording
used that often (``Follow.samples``): a fixed window leaves a backend that got its traffic
late (recording 6's eu-west: its 8th request at 10.2 s, against 5.4 s in the others) with
the priors, and the replay then routes from different estimates than the recording did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from loadtests.sim.loop import Simulation
from loadtests.sim.replay_trace import Recorded, ReplayTrace
from loadtests.sim.results import PolicyRun
from loadtests.sim.scenario import Scenario
from routing.pipeline.router import PipelineRouter
from routing.types import Decision, FirstToken, FleetSnapshot, RequestProfile

Key = tuple[str, int, float | None]  # backend, prompt tokens, predicted TTFT: one request


@dataclass(frozen=True, slots=True)
class Follow:
    """How long a replay follows the recording: until ``seconds`` of arrivals have passed, or
    until ``samples`` recorded first tokens were learned on each backend the recording routed
    at least ``samples`` requests to (whichever comes first when both are given; neither: it
    does not follow)."""

    seconds: float | None = None
    samples: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.seconds) or bool(self.samples)

    def label(self) -> str:
        parts = [f"{self.seconds:g} s"] if self.seconds else []
        parts += [f"{self.samples} samples per backend"] if self.samples else []
        return " or ".join(parts) or "not followed"


def needing(recorded: Sequence[Recorded | None], samples: int) -> frozenset[str]:
    """The backends the recording routed at least ``samples`` requests to: the ones whose
    learned estimate a following router must have filled before it lets go. A backend the
    recording used less (an exploration or two) kept about its priors there too."""
    counts = Counter(r.backend for r in recorded if r is not None and r.backend is not None)
    return frozenset(b for b, n in counts.items() if n >= samples)


class FollowRecorded:
    """``inner`` follows ``recorded[i]`` for the i-th decision until ``follow`` says it has
    learned enough; decisions come in arrival order, one per request (the simulation loop's),
    ``at`` is an arrival in seconds from the first. A followed request's first token teaches
    ``inner`` the *recorded* TTFT and cached tokens, not the simulated ones: its learned
    offsets and rates are then the recording router's, not what the simulated engines would
    have taught it. ``let_go_at``: the arrival (s from the first) of the first request it
    decided on its own."""

    def __init__(
        self,
        inner: PipelineRouter,
        recorded: Sequence[tuple[float, Recorded | None]],
        follow: Follow,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._recorded: Iterator[tuple[float, Recorded | None]] = iter(recorded)
        self._follow = follow
        samples = follow.samples or 0
        self._needs = needing([r for _, r in recorded], samples) if samples else frozenset()
        self.learned: Counter[str] = Counter()  # recorded first tokens taught, per backend
        self._learn: dict[Key, Recorded] = {}
        self._last: Key | None = None  # the latest followed request's key, until its outcome
        self.followed = 0
        self.let_go_at: float | None = None
        # What the loop tells the router at the end goes to ``inner`` unchanged.
        self.observe = inner.observe

    def _following(self, at: float) -> bool:
        if self.let_go_at is not None:
            return False
        seconds, samples = self._follow.seconds, self._follow.samples
        done = bool(seconds) and at >= (seconds or 0.0)
        if samples:
            done = done or all(self.learned[b] >= samples for b in self._needs)
        if done:
            self.let_go_at = at
        return not done

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        at, recorded = next(self._recorded, (now, None))
        self._last = None
        if not self._following(at) or recorded is None or recorded.backend is None:
            return self.inner.decide(profile, fleet, now)
        self.followed += 1
        decision = self.inner.follow(profile, fleet, now, recorded.backend)
        chosen = decision.chosen
        if chosen is not None and chosen.backend == recorded.backend and recorded.ttft_ms:
            self._last = (chosen.backend, profile.prompt_tokens, chosen.predicted_ttft_ms)
            self._learn[self._last] = recorded
        return decision

    def release(self, backend: str) -> None:
        """The latest decision's request never reached ``backend`` (the loop refused it early):
        ``inner`` gives back its reservation, and its recorded TTFT is taught to no other
        request of the same key."""
        if self._last is not None and self._last[0] == backend:
            self._learn.pop(self._last, None)
        self._last = None
        self.inner.release(backend)

    def observe_first_token(self, first: FirstToken) -> None:
        key = (first.backend, first.prompt_tokens, first.predicted_ttft_ms)
        recorded = self._learn.pop(key, None)
        if recorded is not None and recorded.ttft_ms is not None:
            cached = first.cached_tokens
            if recorded.cached_tokens is not None:
                cached = recorded.cached_tokens
            first = replace(first, ttft_ms=recorded.ttft_ms, cached_tokens=cached)
            self.learned[first.backend] += 1
        self.inner.observe_first_token(first)


def following(scenario: Scenario, trace: ReplayTrace, policy: str, follow: Follow) -> Simulation:
    """The simulation of ``policy`` on ``trace`` whose router follows the recorded routes as
    ``follow`` says (``routers[0]`` is then a ``FollowRecorded``). A policy that is not a
    pipeline router, a run with several gateways or ``follow`` inactive: the
    plain simulation."""
    simulation = Simulation(scenario, trace, policy)
    first = trace.file.lines[0].t_s if trace.file.lines else 0.0
    recorded = [(line.t_s - first, line.recorded) for line in trace.file.lines]
    router = simulation.routers[0]
    if follow.active and isinstance(router, PipelineRouter) and len(simulation.routers) == 1:
        simulation.routers[0] = FollowRecorded(router, recorded, follow)
    return simulation


def let_go_at(simulation: Simulation) -> float:
    """Where the comparison with the recording starts: the first request the replay's router
    decided on its own (0 when it never followed; past the last arrival when it never let go)."""
    router = simulation.routers[0]
    if not isinstance(router, FollowRecorded):
        return 0.0
    return router.let_go_at if router.let_go_at is not None else float("inf")


def replay_following(
    scenario: Scenario, trace: ReplayTrace, policy: str, follow_s: float
) -> PolicyRun:
    """``policy`` on ``trace``, following the recorded routes for the first ``follow_s``
    seconds of arrivals (0: not at all)."""
    return following(scenario, trace, policy, Follow(seconds=follow_s)).run()
