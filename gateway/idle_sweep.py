"""Frees, in the background, what keys, tenants and client addresses left behind once they
went quiet.

Quota buckets (gateway/quota) are created on a key's or tenant's first request and would stay
until the LRU bound (``quotas.max_tracked``) pushed them out: a gateway that once saw 100,000
keys kept 100,000 buckets for ever. A bucket that has refilled is as good as a new one, so the
sweep drops it; a key that comes back gets a full bucket, exactly what it had. Likewise the
GeoIP cache (``signals.geo.cache_size`` client addresses) forgets an address no request came
from for a whole interval. The sweep runs every ``routing.prefix_sweep_interval_s``, the
buckets in steps with a yield to the event loop between them.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.quota.limiter import Quotas
from gateway.signals.geo import GeoLocator
from gateway.signals.tasks import TaskOwner, run_periodically

STEP_BUCKETS = 5_000  # a few ms of CPU at most per step


class IdleSweepMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.buckets = Gauge(
            "meridian_quota_buckets",
            "Quota buckets kept after the latest idle sweep (keys and tenants not yet refilled).",
            registry=registry,
        )
        self.dropped = Counter(
            "meridian_quota_buckets_dropped",
            "Refilled quota buckets dropped by the idle sweep.",
            registry=registry,
        )
        self.addresses = Gauge(
            "meridian_geo_cached_addresses",
            "Client addresses in the GeoIP cache after the latest idle sweep (used since the one "
            "before).",
            registry=registry,
        )
        self.sweeps = Counter(
            "meridian_idle_sweeps",
            "Completed idle sweeps (quota buckets, GeoIP cache).",
            registry=registry,
        )


async def sweep_quotas(quotas: Quotas, metrics: IdleSweepMetrics, step: int = STEP_BUCKETS) -> int:
    """One pass over the buckets; returns how many were dropped."""
    dropped = 0
    for removed in quotas.forget_full(step):
        dropped += removed
        await asyncio.sleep(0)  # requests run between steps
    metrics.dropped.inc(dropped)
    metrics.buckets.set(len(quotas))
    metrics.sweeps.inc()
    return dropped


def idle_sweep_ctx(
    quotas_of: Callable[[], Quotas],
    geo_of: Callable[[], GeoLocator],
    interval_s: float,
    registry: CollectorRegistry,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """An aiohttp ``cleanup_ctx`` entry running the sweep for the app's lifetime."""
    metrics = IdleSweepMetrics(registry)

    async def sweep() -> None:
        geo = geo_of()  # the hub a reload swapped in, if any
        geo.forget_idle()
        metrics.addresses.set(geo.cached_addresses())
        await sweep_quotas(quotas_of(), metrics)

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        owner = TaskOwner()
        owner.spawn(
            run_periodically(
                sweep, interval_s=interval_s, jitter=0.1, rng=random.Random(), name="idle-sweep"
            ),
            "idle-sweep",
        )
        yield
        await owner.stop()

    return ctx
