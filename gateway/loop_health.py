"""The event loop's own health, as gauges: how late it runs timers (lag) and how many tasks
it holds. A request path that blocks shows as lag; a leak of tasks (a stream whose handler never
ends, a background loop started twice) shows as a task count that climbs under steady load —
what ``loadtests/bench_soak.py`` watches over hours."""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge

from gateway.signals.tasks import TaskOwner, next_boundary, sleep_until

SAMPLE_INTERVAL_S = 0.5
# Samples ``LatestLag.recent_s`` looks back over (2 s): one sample sees only the turn in progress
# when it fell due, and in a burst turns of seconds alternate with short ones.
RECENT_SAMPLES = 4


class LatestLag:
    """The loop's latest lag samples, for request-path code that does extra work only while
    the loop is behind (gateway/read_lag.py): ``behind`` reads two attributes, no I/O. Kept as
    noted, not worked out per request: ``recent_s`` is the window's largest. One per process:
    the gateways of one process share its loop."""

    __slots__ = ("_window", "due_at", "recent_s", "samples")

    def __init__(self) -> None:
        self.recent_s = 0.0  # the largest of the last RECENT_SAMPLES
        self.samples = 0
        self.due_at = math.inf  # when the next sample falls due (perf_counter); inf: no sampler
        self._window: deque[float] = deque(maxlen=RECENT_SAMPLES)

    def behind(self, now: float, by_s: float) -> bool:
        """Whether the loop is, or was in its recent samples, at least ``by_s`` behind at
        ``now`` (``time.perf_counter()``). The turn in progress counts: a sample overdue by
        ``by_s`` means the turn has run past its due time, and whatever that turn reads
        (in a burst, first tokens by the thousand: docs/results/perf-issue16.md, session 31)
        is read before the late sample can be noted."""
        return self.recent_s >= by_s or now - self.due_at >= by_s

    @property
    def late_s(self) -> float:
        """The latest sample (0 before the first)."""
        return self._window[-1] if self._window else 0.0

    def note(self, late_s: float) -> None:
        self._window.append(late_s)
        self.recent_s = max(self._window)
        self.samples += 1


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
    try:
        while True:  # on the housekeeping loops' shared boundaries: no wake-up of its own
            due = next_boundary(loop.time(), interval_s)
            LATEST.due_at = time.perf_counter() + (due - loop.time())
            await sleep_until(due)
            late_s = max(0.0, loop.time() - due)
            LATEST.note(late_s)
            metrics.lag.set(late_s)
            metrics.tasks.set(len(asyncio.all_tasks(loop)))
    finally:
        LATEST.due_at = math.inf


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
