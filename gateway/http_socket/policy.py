"""Who may hold a connection to the door, and for how long it may take to say what it wants."""

from __future__ import annotations

import logging
import resource
from collections import Counter as Tally
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.errors import ApiError
from gateway.http_socket.config import DoorConfig

log = logging.getLogger("meridian.door")
_FD_RESERVE = 128


def default_max_connections() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, (soft - _FD_RESERVE) // 2)


@dataclass
class DoorMetrics:
    refused: Counter
    timeouts: Counter
    open: Gauge

    @classmethod
    def on(cls, registry: CollectorRegistry) -> DoorMetrics:
        return cls(
            Counter(
                "meridian_door_connections_refused",
                "Client connections closed on arrival by a connection cap",
                ["reason"],
                registry=registry,
            ),
            Counter(
                "meridian_door_timeouts",
                "Requests ended by a door timeout (408), by phase",
                ["phase"],
                registry=registry,
            ),
            Gauge("meridian_door_connections", "Open client connections", registry=registry),
        )


@dataclass
class DoorPolicy:
    config: DoorConfig
    metrics: DoorMetrics
    exempt_ports: set[int | str]  # the admin listener's (ports, Unix paths): never capped
    max_connections: int = 0
    per_client: Tally[str] = field(default_factory=Tally)
    total: int = 0

    def __post_init__(self) -> None:
        if not self.max_connections:
            self.max_connections = self.config.max_connections or default_max_connections()

    def admit(self, client: str, local_port: int | str | None) -> bool:
        """Count a new connection in, or refuse it (False) when a cap is reached."""
        if local_port in self.exempt_ports:
            return True
        if self.total >= self.max_connections:
            return self._refuse("total")
        if self.per_client[client] >= self.config.max_connections_per_client:
            return self._refuse("per_client")
        self.per_client[client] += 1
        self.total += 1
        self.metrics.open.set(self.total)
        return True

    def release(self, client: str) -> None:
        left = self.per_client[client] - 1
        if left > 0:
            self.per_client[client] = left
        else:
            del self.per_client[client]  # bounded by the connections open now
        self.total -= 1
        self.metrics.open.set(self.total)

    def _refuse(self, reason: str) -> bool:
        self.metrics.refused.labels(reason).inc()
        return False


DOOR = web.AppKey("door_policy", DoorPolicy)


def body_too_slow(seconds: float) -> ApiError:
    """The rest of the body is not waited for: the connection ends after this answer."""
    return ApiError(
        408,
        f"the request body did not arrive within {seconds:g}s",
        "invalid_request_error",
        "request_timeout",
        headers=(("Connection", "close"),),
    )
