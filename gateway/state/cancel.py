"""Honouring a cancellation that a client library swallowed.

redis-py can turn a cancel that lands around its own read timeout into an ordinary error or an
empty poll. ``Task.cancel()`` is delivered once, so a background loop that then carries on would
never stop (seen as a hung shutdown). Code that catches a library's errors checks here.
"""

from __future__ import annotations

import asyncio


def raise_if_cancelled() -> None:
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
