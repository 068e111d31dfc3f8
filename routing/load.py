"""In-flight reservations as columns aligned with the current ``FleetView``.

Derived from the ledger when the view's layout changes (or a reservation expires), then kept
current incrementally: on every reserve/release, and for the rows a snapshot refresh rewrote
(their metrics' ``as_of`` may have moved). A decision reads local load with no per-backend
Python work. ``depth`` (running + queued, as the engine or, failing that, this tier sees it)
is shared by the capacity filter and the predictor.
"""

from __future__ import annotations

import numpy as np

from routing.fleet_view import F64, FleetView
from routing.inflight import InFlightLedger

_INF = float("inf")


class LoadColumns:
    def __init__(self, ledger: InFlightLedger) -> None:
        self.ledger = ledger
        self._view: FleetView | None = None
        self._version = -1
        self._oldest = _INF  # the oldest reservation we know of (maybe released since)
        self.open = np.zeros(0)  # reservations not yet released
        self.after_metrics = np.zeros(0)  # ...of which taken after the engine metrics' as_of
        self.last_reserved_at = np.zeros(0)  # NaN: none open
        self.local = np.zeros(0)  # max(in flight as the snapshot says, open reservations)
        self.depth = np.zeros(0)  # engine running + waiting + reserved since, else ``local``
        self.generation = 0  # bumped when every row was re-derived
        self.touched: set[int] = set()  # rows changed since a consumer last drained them

    def bind(self, view: FleetView, now: float) -> None:
        if self._view is not view or self._oldest < now - self.ledger.ttl_s:
            self._derive_all(view, now)
            return
        changed = view.changed_since(self._version)
        self._version = view.version
        if changed is None:
            self._derive_all(view, now)
            return
        for row in changed:
            self._derive_row(row, now)

    def drain(self) -> set[int]:
        """Rows whose load moved since the last drain (the caller owns the returned set)."""
        touched, self.touched = self.touched, set()
        return touched

    def reserve(self, backend: str, now: float) -> None:
        self.ledger.reserve(backend, now)
        self._oldest = min(self._oldest, now)
        row = self._row(backend)
        if row is not None:
            self.open[row] += 1
            if now > self.metrics_as_of(row):
                self.after_metrics[row] += 1
            self.last_reserved_at[row] = self.ledger.last_reserved_at(backend)
            self._update(row)

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
        self._update(row)

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

    def _derive_all(self, view: FleetView, now: float) -> None:
        self._view, self._version = view, view.version
        size = len(view)
        self.open = np.zeros(size)
        self.after_metrics = np.zeros(size)
        self.last_reserved_at = np.full(size, np.nan)
        for backend in self.ledger.busy(now):
            row = view.index.get(backend)
            if row is not None:
                self._from_ledger(row, backend, now)
        oldest = self.ledger.oldest_overall()
        self._oldest = _INF if oldest is None else oldest
        self.local = np.maximum(view.in_flight, self.open)
        self.depth = np.where(
            view.has_metrics, view.running0 + view.waiting0 + self.after_metrics, self.local
        )
        self.generation += 1
        self.touched = set()

    def _derive_row(self, row: int, now: float) -> None:
        assert self._view is not None
        backend = self._view.names[row]
        self.open[row], self.after_metrics[row] = 0.0, 0.0
        self.last_reserved_at[row] = np.nan
        self._from_ledger(row, backend, now)
        self._update(row)

    def _from_ledger(self, row: int, backend: str, now: float) -> None:
        assert self._view is not None
        self.open[row] = self.ledger.open_count(backend, now)
        since = float(self._view.metrics_as_of[row])
        self.after_metrics[row] = self.ledger.opened_after(backend, since, now)
        last = self.ledger.last_reserved_at(backend)
        self.last_reserved_at[row] = np.nan if last is None else last

    def _update(self, row: int) -> None:
        view = self._view
        assert view is not None
        local = max(view.in_flight.item(row), self.open.item(row))
        self.local[row] = local
        if view.has_metrics[row]:
            engine = view.running0.item(row) + view.waiting0.item(row)
            self.depth[row] = engine + self.after_metrics.item(row)
        else:
            self.depth[row] = local
        self.touched.add(row)

    def _row(self, backend: str) -> int | None:
        return None if self._view is None else self._view.index.get(backend)
