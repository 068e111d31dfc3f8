"""Helpers for observability tests: captured log lines and waiting on a condition."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from typing import Any

import orjson


async def until(predicate: Callable[[], bool], within_s: float = 30.0) -> None:
    """Wait for ``predicate()`` (an event: a line written, a counter moved); the bound only
    turns a hang into a failure."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not predicate():
        if loop.time() - start > within_s:
            raise AssertionError(f"condition not met within {within_s} s")
        await asyncio.sleep(0.002)


class CapturedLog:
    """Lines the gateway's JSON formatter wrote, for tests to parse."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    def text(self) -> str:
        return self.stream.getvalue()

    def lines(self, logger: str | None = None) -> list[dict[str, Any]]:
        parsed = [orjson.loads(line) for line in self.text().splitlines() if line]
        return [p for p in parsed if logger is None or p["logger"] == logger]

    def requests(self) -> list[dict[str, Any]]:
        return self.lines("meridian.request")

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        events = self.lines("meridian.event")
        return [e for e in events if name is None or e["event"] == name]

    async def wait_requests(self, count: int, within_s: float = 30.0) -> list[dict[str, Any]]:
        """Until ``count`` request lines are in (the line is written when the request ends,
        which for a cancelled stream is after the client is gone)."""
        await until(lambda: len(self.requests()) >= count, within_s)
        return self.requests()
