"""Prometheus view of the shared-state layer, read from ``SharedStateSync.health()`` at
scrape time (no gauges to keep in step)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from gateway.state.breaker import BreakerState
from gateway.state.sync import SharedStateSync


class StateCollector(Collector):
    def __init__(self, sync: SharedStateSync) -> None:
        self._sync = sync

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        health = self._sync.health()
        degraded = GaugeMetricFamily(
            "meridian_state_degraded",
            "1 when the shared state store is unreachable and the replica serves on local state",
            labels=["backend"],
        )
        degraded.add_metric([health.backend], 1.0 if health.degraded else 0.0)
        yield degraded
        spells = CounterMetricFamily(
            "meridian_state_degraded_spells",
            "Times the replica lost the shared state store and served on local state (one per "
            "state_degraded event; a spell shorter than the scrape interval shows only here)",
            labels=["backend"],
        )
        spells.add_metric([health.backend], float(health.degraded_spells))
        yield spells
        breaker = GaugeMetricFamily(
            "meridian_state_breaker_state",
            "Circuit breaker around state store calls (1 for the current state)",
            labels=["state"],
        )
        for state in BreakerState:
            breaker.add_metric([str(state)], 1.0 if health.breaker is state else 0.0)
        yield breaker
        yield GaugeMetricFamily(
            "meridian_state_pending_blocks",
            "Prefix blocks noted locally and not yet written to the store",
            value=health.pending_blocks,
        )
        yield GaugeMetricFamily(
            "meridian_state_last_ok_age_seconds",
            "Seconds since the last successful state store call (-1: never)",
            value=-1.0 if health.last_ok_age_s is None else health.last_ok_age_s,
        )
        yield GaugeMetricFamily(
            "meridian_state_leases_held",
            "Probe leases this replica holds",
            value=len(health.leases_held),
        )


def register_state_metrics(
    sync: SharedStateSync, registry: CollectorRegistry = REGISTRY
) -> StateCollector:
    collector = StateCollector(sync)
    registry.register(collector)
    return collector
