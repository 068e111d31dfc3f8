"""Outlier ejection after Envoy: pure logic, clock injected, no I/O.

Two detectors feed one ejection decision:

- consecutive failures: ``consecutive_failures`` server errors / connect errors / timeouts in a
  row eject the backend at once;
- failure rate: every ``interval_s``, a backend with at least ``failure_rate_min_requests``
  requests in the window and a failure share at or above ``failure_rate_threshold`` is ejected.

Ejection lasts ``base_ejection_s x ejections`` (capped at ``max_ejection_s``), so a backend
that keeps failing stays out longer each time; the multiplier drops by one for every full
interval it then stays healthy. Ejection never takes out more than ``max_ejection_percent`` of
the fleet (but always allows one, as Envoy does). When the healthy share (not ejected, active
probes passing) falls below ``panic_threshold``, health is ignored and traffic goes to every
backend: better a degraded fleet than none. Readmission is by schedule: a backend is healthy
again the moment ``ejected_until`` passes; ``tick`` turns that into an event.

Every mutating call returns the events it caused (for logs and metrics), so the caller acts on
them; nothing here logs or counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class FailureKind(StrEnum):
    SERVER_ERROR = "server_error"  # 5xx, or a stream broken by the backend
    CONNECT_ERROR = "connect_error"
    TIMEOUT = "timeout"
    CLIENT_ERROR = "client_error"  # 4xx: the request's fault, not the backend's
    CANCELLED = "cancelled"  # the client went away


BACKEND_FAULTS = frozenset(
    {FailureKind.SERVER_ERROR, FailureKind.CONNECT_ERROR, FailureKind.TIMEOUT}
)


class OutlierConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Eject backends that fail repeatedly (Envoy-style outlier detection).",
    )
    consecutive_failures: int = Field(
        default=5, ge=1, description="Failures in a row that eject a backend."
    )
    interval_s: float = Field(
        default=10.0, gt=0, description="Window over which failure rates are judged, in seconds."
    )
    failure_rate_threshold: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Failure rate in a window (0..1] that ejects a backend.",
    )
    failure_rate_min_requests: int = Field(
        default=20, ge=1, description="Requests a window needs before its failure rate counts."
    )
    base_ejection_s: float = Field(
        default=30.0,
        gt=0,
        description="First ejection's length; each repeat ejection lasts longer.",
    )
    max_ejection_s: float = Field(default=300.0, gt=0, description="Longest an ejection lasts.")
    max_ejection_percent: float = Field(
        default=10.0, ge=0, le=100, description="Most backends ejected at once, in percent of all."
    )
    panic_threshold: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="When fewer than this share of backends are healthy, health is ignored (panic mode); 0 disables it.",
    )


class OutlierEventKind(StrEnum):
    EJECTED = "ejected"
    READMITTED = "readmitted"
    EJECTION_SKIPPED = "ejection_skipped"  # would have ejected, but the cap was reached
    PANIC_ENTERED = "panic_entered"
    PANIC_EXITED = "panic_exited"


@dataclass(frozen=True, slots=True)
class OutlierEvent:
    kind: OutlierEventKind
    at: float
    backend: str | None = None
    reason: str = ""
    ejections: int = 0
    until: float | None = None


@dataclass(frozen=True, slots=True)
class HealthView:
    """Health of the whole fleet at one instant, computed once for a snapshot."""

    panic: bool
    healthy: frozenset[str]  # what routing may use (everything, in panic mode)
    usable: frozenset[str]  # not ejected and passing active probes, whatever the panic state
    ejected_until: Mapping[str, float]  # current ejections, whatever the panic state


@dataclass(slots=True)
class _Host:
    consecutive: int = 0
    window_requests: int = 0
    window_failures: int = 0
    ejections: int = 0
    ejected_until: float | None = None
    healthy_since: float = 0.0
    active_healthy: bool = True


class OutlierDetector:
    def __init__(
        self, backends: Iterable[str], config: OutlierConfig, clock: Callable[[], float]
    ) -> None:
        self._config = config
        self._clock = clock
        now = clock()
        self._hosts: dict[str, _Host] = {name: _Host(healthy_since=now) for name in backends}
        self._window_started = now
        self._panic = False

    @property
    def config(self) -> OutlierConfig:
        return self._config

    def ejection_cap(self) -> int:
        return max(1, math.floor(len(self._hosts) * self._config.max_ejection_percent / 100))

    def ejected_until(self, backend: str) -> float | None:
        host = self._hosts.get(backend)
        if host is None or host.ejected_until is None or host.ejected_until <= self._clock():
            return None
        return host.ejected_until

    def ejection_count(self, backend: str) -> int:
        host = self._hosts.get(backend)
        return host.ejections if host is not None else 0

    def is_healthy(self, backend: str) -> bool:
        return backend in self.health().healthy

    def health(self) -> HealthView:
        now = self._clock()
        ejected = {
            name: host.ejected_until
            for name, host in self._hosts.items()
            if host.ejected_until is not None and host.ejected_until > now
        }
        usable = frozenset(
            name
            for name, host in self._hosts.items()
            if host.active_healthy and name not in ejected
        )
        panic = self._in_panic(len(usable))
        return HealthView(
            panic=panic,
            healthy=frozenset(self._hosts) if panic else usable,
            usable=usable,
            ejected_until=ejected,
        )

    def record(
        self, backend: str, ok: bool, failure: FailureKind | None = None
    ) -> list[OutlierEvent]:
        """One request's outcome. ``ok=False`` without a kind counts as a server error."""
        host = self._hosts.get(backend)
        if host is None or not self._config.enabled or failure is FailureKind.CANCELLED:
            return []  # a cancelled request says nothing about the backend
        backend_fault = not ok and (failure is None or failure in BACKEND_FAULTS)
        host.window_requests += 1
        if not backend_fault:
            host.consecutive = 0
            return []
        host.window_failures += 1
        host.consecutive += 1
        if host.consecutive < self._config.consecutive_failures:
            return []
        host.consecutive = 0
        reason = f"{self._config.consecutive_failures} consecutive failures"
        return self._eject(backend, host, reason) + self._panic_events()

    def set_active_health(self, backend: str, healthy: bool) -> list[OutlierEvent]:
        """Active probes' verdict; it counts toward the healthy share that decides panic."""
        host = self._hosts.get(backend)
        if host is None or host.active_healthy == healthy:
            return []
        host.active_healthy = healthy
        return self._panic_events()

    def tick(self) -> list[OutlierEvent]:
        """Readmit expired ejections, and once per interval evaluate failure rates."""
        now = self._clock()
        events: list[OutlierEvent] = []
        for name, host in self._hosts.items():
            if host.ejected_until is not None and host.ejected_until <= now:
                host.ejected_until = None
                host.healthy_since = now
                events.append(
                    OutlierEvent(OutlierEventKind.READMITTED, now, name, ejections=host.ejections)
                )
        if now - self._window_started >= self._config.interval_s:
            events.extend(self._close_window(now))
        return events + self._panic_events()

    def _close_window(self, now: float) -> list[OutlierEvent]:
        config = self._config
        events: list[OutlierEvent] = []
        for name, host in self._hosts.items():
            ejected = host.ejected_until is not None
            if not ejected and host.ejections and now - host.healthy_since >= config.interval_s:
                host.ejections -= 1  # a full interval of good health earns back one step
                host.healthy_since = now
            enough = host.window_requests >= config.failure_rate_min_requests
            if config.enabled and enough and not ejected:
                rate = host.window_failures / host.window_requests
                if rate >= config.failure_rate_threshold:
                    reason = f"failure rate {rate:.0%} over {host.window_requests} requests"
                    events.extend(self._eject(name, host, reason))
            host.window_requests = host.window_failures = 0
        self._window_started = now
        return events

    def _eject(self, backend: str, host: _Host, reason: str) -> list[OutlierEvent]:
        now = self._clock()
        if host.ejected_until is not None and host.ejected_until > now:
            return []  # already out; failures from requests that were in flight
        if len(self.health().ejected_until) >= self.ejection_cap():
            return [OutlierEvent(OutlierEventKind.EJECTION_SKIPPED, now, backend, reason)]
        host.ejections += 1
        duration = min(self._config.base_ejection_s * host.ejections, self._config.max_ejection_s)
        host.ejected_until = now + duration
        return [
            OutlierEvent(
                OutlierEventKind.EJECTED,
                now,
                backend,
                reason,
                ejections=host.ejections,
                until=host.ejected_until,
            )
        ]

    def _in_panic(self, usable: int) -> bool:
        if not self._hosts or self._config.panic_threshold <= 0:
            return False
        return usable / len(self._hosts) < self._config.panic_threshold

    def _panic_events(self) -> list[OutlierEvent]:
        view = self.health()
        if view.panic == self._panic:
            return []
        self._panic = view.panic
        kind = OutlierEventKind.PANIC_ENTERED if view.panic else OutlierEventKind.PANIC_EXITED
        reason = f"{len(view.usable)}/{len(self._hosts)} backends usable"
        return [OutlierEvent(kind, self._clock(), reason=reason)]
