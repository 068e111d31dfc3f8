"""Housekeeping loops wake on shared boundaries (gateway/signals/tasks.py): one wake-up of an
idle gateway for every loop due then, instead of one each."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from gateway.signals.tasks import next_boundary, run_aligned, sleep_until

NOW = st.floats(min_value=0.0, max_value=1e7, allow_nan=False)
INTERVAL_MS = st.integers(min_value=1, max_value=600_000)


@given(NOW, INTERVAL_MS)
def test_the_next_boundary_is_a_whole_multiple_within_one_interval(
    now: float, interval_ms: int
) -> None:
    boundary = next_boundary(now, interval_ms / 1000.0)
    due_ms = round(boundary * 1000.0)
    assert due_ms % interval_ms == 0
    ahead_ms = boundary * 1000.0 - now * 1000.0
    assert 1.0 - 1e-3 <= ahead_ms <= interval_ms + 1.0 + 1e-3  # never the boundary just served


@given(NOW, st.sampled_from([(500, 1000), (1000, 2000), (250, 1000), (1000, 30_000)]))
def test_a_longer_period_lands_on_a_boundary_of_the_shorter(
    now: float, periods: tuple[int, int]
) -> None:
    short_ms, long_ms = periods
    assert round(next_boundary(now, long_ms / 1000.0) * 1000.0) % short_ms == 0


async def test_sleepers_for_one_time_wake_in_one_pass_of_the_loop() -> None:
    loop = asyncio.get_running_loop()
    when = loop.time() + 0.02
    order: list[str] = []

    async def first() -> None:
        await sleep_until(when)
        order.append("first")
        loop.call_soon(order.append, "next pass")  # runs after every task woken with it

    async def second() -> None:
        await asyncio.sleep(0)  # starts its wait a pass later: the time, not the start, counts
        await sleep_until(when)
        order.append("second")

    await asyncio.gather(first(), second())
    assert order == ["first", "second", "next pass"]


async def test_a_sleeper_cancelled_leaves_no_timer_behind() -> None:
    loop = asyncio.get_running_loop()
    task = loop.create_task(sleep_until(loop.time() + 3600.0))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()


async def test_aligned_loops_started_apart_run_in_the_same_passes() -> None:
    """Two loops of one period, the second started 30 ms later: without alignment each would
    run 30 ms after the other, in a pass of its own; aligned, from the first boundary they both
    wait for on, each run of the second comes in the same pass of the loop as one of the first."""
    loop = asyncio.get_running_loop()
    log: list[str] = []  # steps, and "|" after each pass that ran one (call_soon runs next)
    runs = {"a": 0, "b": 0}
    done = asyncio.Event()

    async def step(name: str) -> None:
        runs[name] += 1
        log.append(name)
        loop.call_soon(log.append, "|")
        if min(runs.values()) >= 4:
            done.set()

    def start(name: str) -> asyncio.Task[None]:
        periodic = run_aligned(lambda: step(name), interval_s=0.2, name=name)
        return loop.create_task(periodic)

    tasks = [start("a")]
    await asyncio.sleep(0.03)
    tasks.append(start("b"))
    await done.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    passes = [set(group) for group in "".join(log).split("|") if group]
    with_b = [group for group in passes if "b" in group]
    assert len(with_b) >= 4
    # The first boundary may fall between the two starts; from the second run of b on, every
    # run of b shares its pass with a run of a.
    assert all("a" in group for group in with_b[1:])
