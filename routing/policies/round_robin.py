"""Round-robin among backends that serve the model: the simplest honest baseline."""

from __future__ import annotations

from routing.types import Candidate, Decision, FleetSnapshot, Observation, Rejection, RequestProfile


class RoundRobinRouter:
    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        eligible: list[str] = []
        rejected: list[Rejection] = []
        for name in sorted(fleet.backends):
            state = fleet.backends[name]
            if profile.model not in state.spec.models:
                rejected.append(Rejection(name, "serves_model", f"does not serve {profile.model}"))
            elif name in profile.exclude:
                rejected.append(Rejection(name, "not_visited", "already on this request's path"))
            elif not state.healthy or (
                state.ejected_until is not None and state.ejected_until > now
            ):
                rejected.append(Rejection(name, "healthy", "unhealthy or ejected"))
            else:
                eligible.append(name)
        if not eligible:
            return Decision(self.name, (), tuple(rejected))
        start = self._next % len(eligible)
        self._next += 1
        order = eligible[start:] + eligible[:start]
        ranked = tuple(
            Candidate(backend=name, score=float(rank), reason="round-robin turn")
            for rank, name in enumerate(order)
        )
        return Decision(self.name, ranked, tuple(rejected))

    def observe(self, observation: Observation) -> None:
        return None
