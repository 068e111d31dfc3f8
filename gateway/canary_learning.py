"""Hands canary first tokens to routing's learner, in the background (issue 14).

A canary is a one-token request the prober sends a backend itself; it takes the request path
(unlike an RTT probe, which a load balancer or an edge may answer), so its TTFT is evidence of
what requests there would pay, and it re-measures a backend no request is choosing. Every
signals tick the hub's new canary results go to the router now in place (a reload swaps both),
which learns each against what it predicts there for a request of the canary's size
(``PipelineRouter.observe_canary``). Off the request path: a tick's work is a few predictions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from gateway.signals.tasks import TaskOwner, run_aligned
from routing.types import FleetSnapshot

# A canary's prompt ("Reply with one word.") as a chat template makes it: about this many tokens.
CANARY_PROMPT_TOKENS = 16


class CanaryFleet(Protocol):
    canaries: deque[tuple[str, float, float, bool]]

    def snapshot(self) -> FleetSnapshot: ...


class CanaryLearning:
    def __init__(
        self,
        router_of: Callable[[], object],
        fleet_of: Callable[[], CanaryFleet],
        learned: Counter,
    ) -> None:
        self._router_of, self._fleet_of, self._learned = router_of, fleet_of, learned

    async def step(self) -> int:
        """Hand over every canary result since the last step; returns how many were learned."""
        fleet = self._fleet_of()
        pending = fleet.canaries
        observe = getattr(self._router_of(), "observe_canary", None)
        if not pending or not callable(observe):
            pending.clear()
            return 0
        snapshot, learned = fleet.snapshot(), 0
        while pending:
            backend, at, ttft_ms, cold = pending.popleft()
            if observe(snapshot, backend, at, ttft_ms, CANARY_PROMPT_TOKENS, cold):
                learned += 1
                self._learned.labels(backend=backend).inc()
        return learned


def canary_learning_ctx(
    router_of: Callable[[], object],
    fleet_of: Callable[[], CanaryFleet],
    interval_s: float,
    registry: CollectorRegistry,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """An aiohttp ``cleanup_ctx`` entry feeding canaries to routing for the app's lifetime."""
    learned = Counter(
        "meridian_canaries_learned",
        "Canary first tokens routing learned from, as it learns from requests' first tokens.",
        ["backend"],
        registry=registry,
    )

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        feed = CanaryLearning(router_of, fleet_of, learned)
        owner = TaskOwner()
        owner.spawn(
            run_aligned(feed.step, interval_s=interval_s, name="canary-learning"),
            "canary-learning",
        )  # fmt: skip
        yield
        await owner.stop()

    return ctx
