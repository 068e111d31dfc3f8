"""The event loop's own health, as gauges: how late it runs timers (lag) and how many tasks
it holds. A request path that blocks shows as lag; a leak of tasks (a stream whose handler never
ends, a background loop started twice) shows as a task count that climbs under steady load —
what ``loadtests/bench_soak.py`` watches over hours."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge

from gateway.signals.tasks import TaskOwner, next_boundary, sleep_until

SAMPLE_INTERVAL_S = 0.5


class LatestLag:
    """The latest lag sample, for request-path code that does extra work only while the loop
    is behind (gateway/read_lag.py): a plain attribute, read without a call. One per process:
    the gateways of one process share its loop."""

    __slots__ = ("late_s",)

    def __init__(self) -> None:
        self.late_s = 0.0


LATEST = LatestLag()


class LoopHealthMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.lag = Gauge(
            "meridian_event_loop_lag_seconds",
            "How late the event loop ran a timer at the latest sample (0.5 s period).",
            registry=registry,
        )
        self.tasks = Gauge(
            "meridian_event_loop_tasks",
            "asyncio tasks alive in the gateway's event loop at the latest sample.",
            registry=registry,
        )


async def sample_forever(metrics: LoopHealthMetrics, interval_s: float = SAMPLE_INTERVAL_S) -> None:
    loop = asyncio.get_running_loop()
    while True:  # on the housekeeping loops' shared boundaries: no wake-up of its own
        due = next_boundary(loop.time(), interval_s)
        await sleep_until(due)
        LATEST.late_s = late_s = max(0.0, loop.time() - due)
        metrics.lag.set(late_s)
        metrics.tasks.set(len(asyncio.all_tasks(loop)))


def loop_health_ctx(
    registry: CollectorRegistry,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """An aiohttp ``cleanup_ctx`` entry sampling the loop for the app's lifetime."""
    metrics = LoopHealthMetrics(registry)

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        owner = TaskOwner()
        owner.spawn(sample_forever(metrics), "loop-health")
        yield
        await owner.stop()

    return ctx
