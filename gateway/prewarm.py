"""Sends the warm-ups the router's pre-warm share asks for (routing/prewarm.py), in the background.

Every signals tick the router is asked which serverless backends of its warm share are cold
or near their idle timeout; each gets a one-token canary (``SignalHub.warm_up``), which the
prober records as traffic and as a warm TTFT or a cold start. Off unless the policy sets
``prewarm_share``: a policy without it names no backend, so the loop costs one call a tick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from gateway.signals.tasks import TaskOwner, run_aligned
from routing.types import FleetSnapshot

logger = logging.getLogger(__name__)


class WarmingFleet(Protocol):
    def snapshot(self) -> FleetSnapshot: ...

    def warm_up(self, backend: str) -> Awaitable[bool]: ...


class Prewarm:
    """One round: ask the router now in place (a reload swaps it), send what it names."""

    def __init__(
        self,
        router_of: Callable[[], object],
        fleet_of: Callable[[], WarmingFleet],
        sent: Counter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._router_of, self._fleet_of, self._sent, self._clock = (
            router_of, fleet_of, sent, clock,
        )  # fmt: skip

    async def step(self) -> Sequence[str]:
        warm_up = getattr(self._router_of(), "warm_up", None)
        if not callable(warm_up):
            return ()
        fleet = self._fleet_of()
        names: tuple[str, ...] = tuple(warm_up(fleet.snapshot(), self._clock()))
        for name in names:
            if await fleet.warm_up(name):
                self._sent.labels(backend=name).inc()
        if names:
            logger.info("pre-warm: sent warm-ups to %s", ", ".join(names))
        return names


def prewarm_ctx(
    router_of: Callable[[], object],
    fleet_of: Callable[[], WarmingFleet],
    interval_s: float,
    registry: CollectorRegistry,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """An aiohttp ``cleanup_ctx`` entry running the warm-ups for the app's lifetime."""
    sent = Counter(
        "meridian_prewarm_requests",
        "One-token warm-ups sent to serverless backends the routing policy keeps warm "
        "(prewarm_share).",
        ["backend"],
        registry=registry,
    )

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        prewarm = Prewarm(router_of, fleet_of, sent)

        owner = TaskOwner()
        owner.spawn(
            run_aligned(prewarm.step, interval_s=interval_s, name="prewarm"),
            "prewarm",
        )
        yield
        await owner.stop()

    return ctx
