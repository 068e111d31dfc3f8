"""Prometheus metrics for the signal loops, on a registry the caller owns.

Labels are backend names and error kinds only: bounded, and never request content.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.signals.engine_signals import EXPECTED, EngineSignals
from gateway.signals.errors import SignalError
from gateway.signals.outlier import OutlierEvent, OutlierEventKind
from gateway.signals.probe_summary import ProbeObserver, ProbeSummary

_RTT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class SignalMetrics(ProbeObserver):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.probe_rtt = Histogram(
            "meridian_probe_rtt_seconds",
            "Probe round trip per backend; connection=pooled (kept alive) or fresh (new one).",
            ["backend", "connection"],
            buckets=_RTT_BUCKETS,
            registry=registry,
        )
        self.probe_rtt_ewma = Gauge(
            "meridian_probe_rtt_ewma_seconds",
            "Smoothed pooled probe round trip: the RTT routing uses.",
            ["backend"],
            registry=registry,
        )
        self.probe_errors = Counter(
            "meridian_probe_errors",
            "Failed or non-2xx probes, by error kind; kind lagged: the gateway's own event loop "
            "ran the timeout late, no verdict on the backend.",
            ["backend", "kind"],
            registry=registry,
        )
        self.probe_healthy = Gauge(
            "meridian_backend_probe_healthy",
            "1 while active probes pass (fewer than unhealthy_after failures in a row).",
            ["backend"],
            registry=registry,
        )
        self.canary_ttft = Histogram(
            "meridian_canary_ttft_seconds",
            "Time to first token of 1-token canary generations (warm and cold).",
            ["backend"],
            buckets=_TTFT_BUCKETS,
            registry=registry,
        )
        self.cold_starts = Counter(
            "meridian_canary_cold_starts",
            "Canaries that found the backend cold.",
            ["backend"],
            registry=registry,
        )
        self.scrape_errors = Counter(
            "meridian_scrape_errors",
            "Failed engine metrics scrapes, by error kind; kind lagged: the gateway's own event "
            "loop ran the timeout late, no verdict on the backend.",
            ["backend", "kind"],
            registry=registry,
        )
        self.engine_signal_missing = Gauge(
            "meridian_engine_signal_missing",
            "1 while a backend's metrics page lacks a signal its engine's current release "
            "exports (a renamed metric or the wrong engine): routing treats it as unknown.",
            ["backend", "signal"],
            registry=registry,
        )
        self.scrape_duration = Histogram(
            "meridian_scrape_duration_seconds",
            "Engine metrics scrape time, fetch and parse.",
            ["backend"],
            buckets=_RTT_BUCKETS,
            registry=registry,
        )
        self.signal_age = Gauge(
            "meridian_signal_age_seconds",
            "Age of each backend's latest good signal; signal=probe or engine_metrics.",
            ["backend", "signal"],
            registry=registry,
        )
        self.ejections = Counter(
            "meridian_outlier_ejections",
            "Outlier ejections per backend.",
            ["backend"],
            registry=registry,
        )
        self.ejections_skipped = Counter(
            "meridian_outlier_ejections_skipped",
            "Ejections not made because max_ejection_percent was reached.",
            ["backend"],
            registry=registry,
        )
        self.ejected = Gauge(
            "meridian_backend_ejected",
            "1 while the backend is ejected.",
            ["backend"],
            registry=registry,
        )
        self.panic = Gauge(
            "meridian_outlier_panic",
            "1 while too few backends are healthy and health is being ignored.",
            registry=registry,
        )

    def on_probe(
        self,
        summary: ProbeSummary,
        pooled_ms: float | None,
        fresh_ms: float | None,
        error: SignalError | None,
    ) -> None:
        backend = summary.backend
        if pooled_ms is not None:
            self.probe_rtt.labels(backend, "pooled").observe(pooled_ms / 1000.0)
        if fresh_ms is not None:
            self.probe_rtt.labels(backend, "fresh").observe(fresh_ms / 1000.0)
        if summary.rtt_ms is not None:
            self.probe_rtt_ewma.labels(backend).set(summary.rtt_ms / 1000.0)
        if error is not None:
            self.probe_errors.labels(backend, error.kind.value).inc()
        self.probe_healthy.labels(backend).set(1 if summary.active_healthy else 0)

    def on_canary(self, summary: ProbeSummary, ttft_ms: float, cold: bool) -> None:
        self.canary_ttft.labels(summary.backend).observe(ttft_ms / 1000.0)
        if cold:
            self.cold_starts.labels(summary.backend).inc()

    def on_scrape(
        self, backend: str, result: EngineSignals | SignalError, duration_s: float
    ) -> None:
        self.scrape_duration.labels(backend).observe(duration_s)
        if isinstance(result, SignalError):
            self.scrape_errors.labels(backend, result.kind.value).inc()
            return
        for signal in EXPECTED.get(result.engine, ()):
            self.engine_signal_missing.labels(backend, signal).set(signal in result.missing)

    def on_outlier_events(self, events: Iterable[OutlierEvent]) -> None:
        for event in events:
            if event.kind is OutlierEventKind.EJECTED and event.backend is not None:
                self.ejections.labels(event.backend).inc()
                self.ejected.labels(event.backend).set(1)
            elif event.kind is OutlierEventKind.READMITTED and event.backend is not None:
                self.ejected.labels(event.backend).set(0)
            elif event.kind is OutlierEventKind.EJECTION_SKIPPED and event.backend is not None:
                self.ejections_skipped.labels(event.backend).inc()
            elif event.kind is OutlierEventKind.PANIC_ENTERED:
                self.panic.set(1)
            elif event.kind is OutlierEventKind.PANIC_EXITED:
                self.panic.set(0)

    def set_age(self, backend: str, signal: str, age_s: float | None) -> None:
        if age_s is not None:
            self.signal_age.labels(backend, signal).set(age_s)
