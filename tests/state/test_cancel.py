"""A cancellation a client library swallowed still stops the background loop."""

from __future__ import annotations

import asyncio

import pytest

from gateway.state.cancel import raise_if_cancelled


async def test_a_swallowed_cancel_is_raised_again() -> None:
    started = asyncio.Event()

    async def loop_that_swallows() -> None:
        while True:
            try:
                started.set()
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass  # what a library may do: the cancel becomes an empty poll
            raise_if_cancelled()

    task = asyncio.create_task(loop_that_swallows())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2.0)


async def test_nothing_happens_without_a_cancel() -> None:
    raise_if_cancelled()
