"""Background loops that start and stop cleanly: no leaked tasks, cancellation passes through."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

logger = logging.getLogger(__name__)

FIRST_RUN_SPREAD_S = 1.0


def jittered(interval_s: float, jitter: float, rng: random.Random) -> float:
    """``interval_s`` spread by +/- ``jitter`` (a fraction), so many loops do not beat in step."""
    return max(0.0, interval_s * (1.0 + rng.uniform(-jitter, jitter)))


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
    last_failure: str | None = None
    await asyncio.sleep(rng.uniform(0.0, min(interval_s, FIRST_RUN_SPREAD_S)))
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
        await asyncio.sleep(jittered(interval_s, jitter, rng))


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
