"""Background loops that start and stop cleanly: no leaked tasks, cancellation passes through."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

logger = logging.getLogger(__name__)

FIRST_RUN_SPREAD_S = 1.0
_SAME_BOUNDARY_MS = 1  # closer than this to a boundary: that boundary has been served


def jittered(interval_s: float, jitter: float, rng: random.Random) -> float:
    """``interval_s`` spread by +/- ``jitter`` (a fraction), so many loops do not beat in step."""
    return max(0.0, interval_s * (1.0 + rng.uniform(-jitter, jitter)))


def next_boundary(now: float, interval_s: float) -> float:
    """The next whole multiple of ``interval_s`` after ``now`` on the same clock, in whole
    milliseconds (uvloop's clock and timers run in them).

    Housekeeping loops that sleep until it (:func:`sleep_aligned`) wake together whenever
    their periods divide one another (0.5 s and 1 s loops at every second): one wake-up of an
    idle process for all of them instead of one each. On this class of VM a wake-up from idle
    costs a few hundred microseconds of CPU however little the loop then does
    (docs/results/perf-issue16.md, session 12)."""
    now_ms, interval_ms = round(now * 1000.0), max(1, round(interval_s * 1000.0))
    due_ms = now_ms - now_ms % interval_ms + interval_ms
    # A timer may fire a hair early (asyncio runs handles due within its clock's resolution):
    # a boundary that close is the one just served, so the next run waits for the one after.
    if due_ms - now * 1000.0 < _SAME_BOUNDARY_MS:
        due_ms += interval_ms
    return due_ms / 1000.0


async def sleep_until(when: float) -> None:
    """Sleep until the running loop's clock reads ``when``. Loops that wait for one ``when``
    wake in one pass of the loop: ``call_at`` keeps the time itself, where ``sleep`` would turn
    it into a delay from a clock that may have ticked on meanwhile (a millisecond apart)."""
    loop = asyncio.get_running_loop()
    woken = loop.create_future()
    handle = loop.call_at(when, _wake, woken)
    try:
        await woken
    finally:
        handle.cancel()


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


async def sleep_aligned(interval_s: float) -> None:
    """Sleep until the next whole multiple of ``interval_s`` on the running loop's clock."""
    await sleep_until(next_boundary(asyncio.get_running_loop().time(), interval_s))


async def run_periodically(
    step: Callable[[], Awaitable[object]],
    *,
    interval_s: float,
    jitter: float,
    rng: random.Random,
    name: str,
) -> None:
    """Run ``step`` forever on a jittered schedule until cancelled.

    The first run comes after a random delay of up to one interval (at most a second, so a
    fresh gateway has signals quickly), so loops started together (one per backend) spread out
    instead of firing as a burst. A step that raises is logged
    once per distinct failure (not once per run) and the loop carries on: a signal loop that
    dies silently is worse than one that keeps trying.
    """
    await asyncio.sleep(rng.uniform(0.0, min(interval_s, FIRST_RUN_SPREAD_S)))
    await _keep_running(step, name, lambda: asyncio.sleep(jittered(interval_s, jitter, rng)))


async def run_aligned(
    step: Callable[[], Awaitable[object]], *, interval_s: float, name: str
) -> None:
    """Run ``step`` forever until cancelled, each run at the next whole multiple of
    ``interval_s`` on the loop's clock (:func:`next_boundary`): for in-process housekeeping,
    which loads no backend, so such loops share their wake-ups. Failures are handled as in
    :func:`run_periodically`."""
    await sleep_aligned(interval_s)
    await _keep_running(step, name, lambda: sleep_aligned(interval_s))


async def _keep_running(
    step: Callable[[], Awaitable[object]], name: str, pause: Callable[[], Awaitable[None]]
) -> None:
    """Run ``step``, then ``pause()``, forever; a failing step is logged once per distinct
    failure and the loop carries on."""
    last_failure: str | None = None
    while True:
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a loop must survive its step's bugs; logged below
            failure = f"{type(exc).__name__}: {exc}"
            if failure != last_failure:
                logger.exception("signal loop %s: step failed (%s); continuing", name, failure)
            last_failure = failure
        else:
            if last_failure is not None:
                logger.info("signal loop %s: step recovered", name)
            last_failure = None
        await pause()


class TaskOwner:
    """Owns a set of background tasks; ``stop`` cancels them all and waits for them to end."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def running(self) -> bool:
        return any(not task.done() for task in self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro, name=name))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for task, result in zip(tasks, results, strict=True):
            if isinstance(result, Exception):
                logger.error("signal task %s ended with %r", task.get_name(), result)
