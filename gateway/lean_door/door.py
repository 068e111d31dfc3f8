"""What every lean door connection of one listener shares: the application's parts, the way
to hand a connection to aiohttp's server, and the book of open connections (for shutdown)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.auth.authenticator import Authenticator
from gateway.auth.wiring import AUTH
from gateway.http_socket.policy import DOOR, DoorPolicy
from gateway.quota.limiter import QUOTAS, Quotas
from gateway.relay import Relay
from gateway.state_keys import RELAY

if TYPE_CHECKING:
    from gateway.lean_door.connection import LeanConnection

# aiohttp's handler for a connection the lean door hands over; its argument: the client the
# connection was counted in as (the caps), so it is not counted twice.
HandOver = Callable[[str | None], asyncio.Protocol]


class LeanDoor:
    def __init__(
        self, app: web.Application, hand_over: HandOver, registry: CollectorRegistry
    ) -> None:
        self.app = app
        self.relay: Relay = app[RELAY]
        self.policy: DoorPolicy = app[DOOR]
        self.authenticator: Authenticator = app[AUTH]
        self.hand_over = hand_over
        self.connections: set[LeanConnection] = set()
        # Counted as plain numbers, read at scrape time: nothing on the request path locks.
        self.served = 0
        self.handed_over: Counter[str] = Counter()
        registry.register(_LeanCollector(self))

    def quotas(self) -> Quotas:
        return self.app[QUOTAS]  # installed at start-up, after the door is built

    def pre_shutdown(self) -> None:
        """The listeners closed: idle connections close now, busy ones after their answer."""
        for connection in list(self.connections):
            connection.close_when_idle()

    async def shutdown(self, timeout_s: float | None) -> None:
        """Wait for the requests still running (at most ``timeout_s``), then cancel them."""
        tasks = [task for c in self.connections if (task := c.task) is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        for connection in list(self.connections):
            connection.close_when_idle()


class _LeanCollector(Collector):
    def __init__(self, door: LeanDoor) -> None:
        self._door = door

    def collect(self) -> Iterator[Metric]:
        served = CounterMetricFamily(
            "meridian_door_lean_requests",
            "Requests the lean door read and answered itself (gateway/lean_door)",
        )
        served.add_metric([], self._door.served)
        yield served
        handed = CounterMetricFamily(
            "meridian_door_handovers",
            "Connections the lean door handed to aiohttp's server, by why: route (another "
            "route or method), request (an unusual request: chunked, Expect, HTTP/1.0, "
            "malformed, too large), admin_listener",
            labels=["reason"],
        )
        for reason in ("route", "request", "admin_listener"):
            handed.add_metric([reason], self._door.handed_over[reason])
        yield handed
