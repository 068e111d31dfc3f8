"""Replicas sharing what they know about the fleet (the hub's view of gateway/state):
the protocol the shared layer implements, and a scraper that measures only the backends this
replica holds the lease for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gateway.signals.engine_metrics import EngineMetricsScraper
from gateway.signals.engine_signals import EngineSignals
from gateway.signals.errors import SignalError, SignalErrorKind
from gateway.signals.probe_summary import ProbeSummary
from gateway.signals.targets import BackendTarget
from routing.types import BackendState


class SharedFleet(Protocol):
    """What replicas share about the fleet. Synchronous and local: only the shared layer's
    background tasks talk to the store."""

    def leads(self, backend: str) -> bool:
        """Whether this replica probes and scrapes ``backend`` (holds its lease)."""
        ...

    def note_in_flight(self, backend: str, delta: int) -> None: ...

    def version(self) -> int:
        """Grows whenever another replica's counts or measurements changed here."""
        ...

    def publish(self, measured: BackendState, probe: ProbeSummary | None, now: float) -> None:
        """This replica's own measurement of one backend (monotonic times)."""
        ...

    def merge(self, local: BackendState, now: float) -> BackendState:
        """``local`` with the other replicas' in-flight counts added and any newer shared
        measurement in place of the local one."""
        ...

    def remote_active_health(
        self, backend: str, local_probe_at: float | None, now: float
    ) -> bool | None:
        """Another replica's active-probe verdict, if newer than ours (None otherwise)."""
        ...


_NOT_LEADING = SignalError(
    SignalErrorKind.PROTOCOL, "not scraped here: another replica holds this backend's lease"
)


class LeaderScraper(EngineMetricsScraper):
    """Scrapes only the backends ``leads`` says this replica measures."""

    def __init__(self, *args: object, leads: Callable[[str], bool], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._leads = leads

    async def scrape_once(self, target: BackendTarget) -> EngineSignals | SignalError:
        if self._leads(target.name):
            return await super().scrape_once(target)
        return self.latest(target.name) or _NOT_LEADING
