"""The loop both remote feeders run (prefix blocks, learning samples): work that arrives from
other replicas is done a bounded amount per event-loop turn, so requests run in between."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def drain_in_turns(arrived: asyncio.Event, drain: Callable[[], int], per_turn: int) -> None:
    """Until cancelled: wait for ``arrived``, then ``drain()`` (at most ``per_turn`` items a
    call) once a turn until the queue is empty."""
    while True:
        await arrived.wait()
        arrived.clear()
        if drain() == per_turn:
            arrived.set()  # more queued: next turn, after requests had theirs
        await asyncio.sleep(0)
