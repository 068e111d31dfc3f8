"""In-flight reservations as columns aligned with the current ``FleetView``.

Rebuilt from the ledger when the snapshot changes, then kept current incrementally on every
reserve/release, so a decision reads local load with no per-backend Python work.
"""

from __future__ import annotations

import numpy as np

from routing.fleet_view import F64, FleetView
from routing.inflight import InFlightLedger


class LoadColumns:
    def __init__(self, ledger: InFlightLedger) -> None:
        self.ledger = ledger
        self._view: FleetView | None = None
        self.open = np.zeros(0)  # reservations not yet released
        self.after_metrics = np.zeros(0)  # ...of which taken after the engine metrics' as_of
        self.last_reserved_at = np.zeros(0)  # NaN: none open

    def bind(self, view: FleetView, now: float) -> None:
        if self._view is view:
            return
        self._view = view
        size = len(view)
        self.open = np.zeros(size)
        self.after_metrics = np.zeros(size)
        self.last_reserved_at = np.full(size, np.nan)
        for backend in self.ledger.busy(now):
            row = view.index.get(backend)
            if row is None:
                continue
            self.open[row] = self.ledger.open_count(backend, now)
            since = float(view.metrics_as_of[row])
            self.after_metrics[row] = self.ledger.opened_after(backend, since, now)
            self.last_reserved_at[row] = self.ledger.last_reserved_at(backend)

    def reserve(self, backend: str, now: float) -> None:
        self.ledger.reserve(backend, now)
        row = self._row(backend)
        if row is not None:
            self.open[row] += 1
            if now > self.metrics_as_of(row):
                self.after_metrics[row] += 1
            self.last_reserved_at[row] = self.ledger.last_reserved_at(backend)

    def release(self, backend: str) -> None:
        times = self.ledger.oldest(backend)
        self.ledger.release(backend)
        row = self._row(backend)
        if row is None or times is None:
            return
        self.open[row] -= 1
        if times > self.metrics_as_of(row):
            self.after_metrics[row] = max(0.0, self.after_metrics[row] - 1)
        last = self.ledger.last_reserved_at(backend)
        self.last_reserved_at[row] = np.nan if last is None else last

    def metrics_as_of(self, row: int) -> float:
        assert self._view is not None
        return float(self._view.metrics_as_of[row])

    def warming_ms(self, view: FleetView, now: float) -> F64 | None:
        """Remaining cold start of backends this router already woke up, or None if none."""
        warming = self.ledger.warming(now)
        if not warming:
            return None
        out = np.zeros(len(view))
        for backend, left_ms in warming.items():
            row = view.index.get(backend)
            if row is not None:
                out[row] = left_ms
        return out

    def _row(self, backend: str) -> int | None:
        return None if self._view is None else self._view.index.get(backend)
