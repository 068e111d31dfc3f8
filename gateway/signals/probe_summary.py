"""What the probes know about one backend (:class:`ProbeSummary`, the request path reads it
synchronously), the cold starts canaries found, and the observer hooks metrics hang on."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.signals.errors import SignalError
from gateway.signals.rtt_floor import RobustRtt

COLD_STARTS_KEPT = 8


@dataclass(frozen=True, slots=True)
class ColdStartObservation:
    backend: str
    at: float
    ttft_ms: float
    cold_start_ms: float  # the TTFT beyond the warm estimate (or beyond zero with none yet)
    reason: str


@dataclass(frozen=True, slots=True)
class ProbeSummary:
    """Everything the probes know about one backend, as of ``last_probe_at``."""

    backend: str
    rtt_ms: float | None = None  # pooled estimate (fresh if no pooled sample yet)
    # Robust EWMA of pooled round trips (gateway/signals/rtt_floor.py): upward spikes clamped.
    pooled_ms: float | None = None
    pooled_window: tuple[float, ...] = ()  # the last raw pooled samples, bounding the estimate
    fresh_ms: float | None = None
    connect_ms: float | None = None
    last_probe_at: float | None = None
    last_ok_at: float | None = None
    last_error: SignalError | None = None
    consecutive_failures: int = 0
    active_healthy: bool = True
    probes_total: int = 0
    failures_total: int = 0
    warm_ttft_ms: float | None = None  # EWMA of warm canary TTFTs
    last_canary_at: float | None = None
    last_canary_error: SignalError | None = None
    cold_starts: tuple[ColdStartObservation, ...] = field(default=())

    @property
    def rtt_floor_ms(self) -> float | None:
        """The least of the recent pooled round trips: what the network itself costs, at most."""
        return RobustRtt(self.pooled_ms, self.pooled_window).floor_ms


def ewma(previous: float | None, sample: float | None, alpha: float) -> float | None:
    if sample is None:
        return previous
    return sample if previous is None else previous + alpha * (sample - previous)


class ProbeObserver:
    """Hooks for metrics; the defaults do nothing."""

    def on_probe(
        self,
        summary: ProbeSummary,
        pooled_ms: float | None,
        fresh_ms: float | None,
        error: SignalError | None,
    ) -> None:
        return None

    def on_canary(self, summary: ProbeSummary, ttft_ms: float, cold: bool) -> None:
        return None
