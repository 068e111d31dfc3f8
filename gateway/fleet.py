"""The gateway's in-memory view of the fleet, as routing sees it.

The request path asks for a snapshot synchronously; nothing here awaits. The local view counts
this process's in-flight requests and last-traffic times; live signals (probes, engine metrics,
shared state) plug in behind the same :class:`FleetView` protocol.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Protocol

from gateway.config import GatewayConfig
from routing.types import BackendState, FleetSnapshot


class FleetView(Protocol):
    def snapshot(self, now: float) -> FleetSnapshot: ...

    def on_request_start(self, backend: str, now: float) -> None: ...

    def on_request_end(self, backend: str, now: float, ok: bool) -> None: ...


class LocalFleetView:
    """Configuration plus what this process itself has seen."""

    def __init__(self, config: GatewayConfig) -> None:
        self._specs = {b.name: b.spec() for b in config.backends}
        self._region_rtt = {r.name: r.rtt_ms for r in config.regions if r.rtt_ms is not None}
        self._gateway_region = config.region
        self._in_flight: defaultdict[str, int] = defaultdict(int)
        self._last_traffic: dict[str, float] = {}
        self._cached: FleetSnapshot | None = None

    def snapshot(self, now: float) -> FleetSnapshot:
        if self._cached is None:
            self._cached = FleetSnapshot(
                backends={
                    name: BackendState(
                        spec=spec,
                        in_flight=self._in_flight[name],
                        last_traffic_at=self._last_traffic.get(name),
                        as_of=now,
                    )
                    for name, spec in self._specs.items()
                },
                gateway_region=self._gateway_region,
                region_rtt_ms=self._region_rtt,
                taken_at=now,
            )
        return self._cached

    def in_flight(self, backend: str) -> int:
        return self._in_flight[backend]

    def on_request_start(self, backend: str, now: float) -> None:
        self._in_flight[backend] += 1
        self._last_traffic[backend] = now
        self._cached = None

    def on_request_end(self, backend: str, now: float, ok: bool) -> None:
        self._in_flight[backend] = max(0, self._in_flight[backend] - 1)
        self._last_traffic[backend] = now
        self._cached = None
