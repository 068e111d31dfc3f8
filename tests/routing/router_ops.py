"""Steps the routing property tests apply to routers side by side: a snapshot with one
backend's state moved, the router-side operations, and a decision as a comparable string."""

from __future__ import annotations

import dataclasses
from typing import Any

from routing.types import BackendState, FleetSnapshot, Observation, built_from
from tests.routing.routing_fixtures import profile


def moved(
    snapshot: FleetSnapshot, states: dict[str, BackendState], name: str, state: BackendState
) -> FleetSnapshot:
    """``snapshot`` with ``name``'s state now ``state`` (``states`` updated), built from it
    as the gateway's hub builds one (only that row differs)."""
    states[name] = state
    later = dataclasses.replace(snapshot, backends=dict(states))
    built_from(later, snapshot, [name])
    return later


def apply(router: Any, kind: str, name: str, value: int, now: float, fleet: FleetSnapshot) -> None:
    """A router-side operation: release ``name``, observe a request to it (``value``: its
    TTFT in ms), or a pre-warm tick; anything else is not the router's."""
    if kind == "release":
        router.release(name)
    elif kind == "observe":
        router.observe(
            Observation(name, now, ok=True, ttft_ms=float(value), itl_ms=9.0, output_tokens=8)
        )
    elif kind == "warm_up":
        router.warm_up(fleet, now)


def decision(router: Any, snapshot: FleetSnapshot, now: float, k: int) -> str:
    """The ``k``-th request's decision, every field of every candidate, as one string."""
    prof = profile(prompt_tokens=40 + 90 * (k % 4), prefix_hashes=tuple(range(k % 3)))
    decided = router.decide(prof, snapshot, now)
    seen = [
        (c.backend, c.score, c.predicted_ttft_ms, c.predicted_ttft_p90_ms, dict(c.terms_ms),
         dict(c.term_age_s), dict(c.term_spread_ms), c.reason)
        for c in decided.ranked
    ]  # fmt: skip
    return repr([seen, decided.rejected, decided.omitted, decided.explored])
