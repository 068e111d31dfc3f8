"""The fleet as an operator sees it, read when asked (a scrape, the status page): per model, how
many of its backends are usable; per backend, its region, kind, health and ejection.

Read from the relay's *current* state at each call, so it follows a reload. Nothing here is on
the request path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gateway.relay_state import RelayState


@dataclass(frozen=True, slots=True)
class BackendStatus:
    name: str
    region: str
    kind: str
    models: tuple[str, ...]
    usable: bool  # not ejected and passing active probes
    ejected_for_s: float | None  # seconds of ejection left
    in_flight: int


def backend_statuses(state: RelayState) -> list[BackendStatus]:
    health = state.fleet.health()
    now = time.monotonic()
    out = []
    for backend in state.config.backends:
        until = health.ejected_until.get(backend.name)
        out.append(
            BackendStatus(
                name=backend.name,
                region=backend.region,
                kind=str(backend.kind.value),
                models=tuple(backend.models),
                usable=backend.name in health.usable,
                ejected_for_s=None if until is None else max(0.0, until - now),
                in_flight=state.fleet.in_flight(backend.name),
            )
        )
    return out


class FleetStatusCollector(Collector):
    """``meridian_model_backends{model}`` and ``meridian_model_backends_usable{model}``: an
    alert fires when a model has none usable."""

    def __init__(self, current: Callable[[], RelayState]) -> None:
        self._current = current

    def collect(self) -> Iterator[Metric]:
        total = GaugeMetricFamily(
            "meridian_model_backends", "Backends configured for each model.", labels=["model"]
        )
        usable = GaugeMetricFamily(
            "meridian_model_backends_usable",
            "Backends of each model that are not ejected and pass active probes.",
            labels=["model"],
        )
        counts: dict[str, list[int]] = {}
        for status in backend_statuses(self._current()):
            for model in status.models:
                entry = counts.setdefault(model, [0, 0])
                entry[0] += 1
                entry[1] += status.usable
        for model, (configured, ok) in sorted(counts.items()):
            total.add_metric([model], configured)
            usable.add_metric([model], ok)
        yield total
        yield usable
