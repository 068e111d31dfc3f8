"""Sweeps the router's prefix index of expired entries, in the background.

Expired blocks are already ignored by lookups, but until something removes them they stay in
memory: without this sweep a busy gateway grows until the index's size bounds force eviction
(up to two million dead entries per process). The sweep runs every
``routing.prefix_sweep_interval_s``, in bounded steps with a yield to the event loop between
them, so even a full index never holds up a request for more than one step (~1 ms).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol, cast

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.signals.tasks import TaskOwner, run_periodically
from routing.prefix_index import PurgeProgress

STEP_ENTRIES = 5_000  # ~1 ms of CPU per step on this machine class (see docs/memory.md)


class PrefixPurger(Protocol):
    def purge_step(self, now: float, max_scan: int) -> PurgeProgress: ...


def purger_of(router: object) -> PrefixPurger | None:
    """``router`` if it can sweep a prefix index, else None."""
    return cast(PrefixPurger, router) if callable(getattr(router, "purge_step", None)) else None


class PrefixExpiryMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.expired = Counter(
            "meridian_prefix_index_expired",
            "Prefix-index entries removed by the background expiry sweep.",
            registry=registry,
        )
        self.entries = Gauge(
            "meridian_prefix_index_entries",
            "Entries in the router's prefix index after the latest sweep (all backends).",
            registry=registry,
        )
        self.sweeps = Counter(
            "meridian_prefix_index_sweeps",
            "Completed expiry sweeps of the router's prefix index.",
            registry=registry,
        )
        self.longest_step = Gauge(
            "meridian_prefix_index_sweep_longest_step_seconds",
            "The longest single step of the latest sweep: how long it held the event loop.",
            registry=registry,
        )


class PrefixExpiry:
    """Runs the sweep over whatever router ``router_of`` returns now (a reload swaps it)."""

    def __init__(
        self,
        router_of: Callable[[], object],
        interval_s: float,
        metrics: PrefixExpiryMetrics,
        *,
        step_entries: int = STEP_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._router_of = router_of
        self._interval_s = interval_s
        self._metrics = metrics
        self._step_entries = step_entries
        self._clock = clock

    async def sweep(self) -> int:
        """One full round over the index; returns the entries removed."""
        purger = purger_of(self._router_of())
        if purger is None:
            return 0
        removed, longest = 0, 0.0
        while True:
            started = time.perf_counter()
            progress = purger.purge_step(self._clock(), self._step_entries)
            longest = max(longest, time.perf_counter() - started)
            removed += progress.removed
            if progress.round_done:
                break
            await asyncio.sleep(0)  # requests run between steps
        metrics = self._metrics
        metrics.expired.inc(removed)
        metrics.entries.set(progress.entries)
        metrics.longest_step.set(longest)
        metrics.sweeps.inc()
        return removed

    async def run(self) -> None:
        """Sweep forever (until cancelled); a failing step is logged and the loop carries on."""
        await run_periodically(
            self.sweep,
            interval_s=self._interval_s,
            jitter=0.1,
            rng=random.Random(),
            name="prefix-expiry",
        )


def prefix_expiry_ctx(
    router_of: Callable[[], object], interval_s: float, registry: CollectorRegistry
) -> Callable[[web.Application], AsyncIterator[None]]:
    """An aiohttp ``cleanup_ctx`` entry running the sweep for the app's lifetime."""
    metrics = PrefixExpiryMetrics(registry)

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        owner = TaskOwner()
        owner.spawn(PrefixExpiry(router_of, interval_s, metrics).run(), "prefix-expiry")
        yield
        await owner.stop()

    return ctx
