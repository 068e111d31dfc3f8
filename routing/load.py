"""In-flight reservations as columns aligned with the current ``FleetView``.

Derived from the ledger when the view's layout changes (or a reservation expires), then kept
current incrementally: on every reserve/release, and for the rows a snapshot refresh rewrote
(their metrics' ``as_of`` may have moved). A decision reads local load with no per-backend
Python work. ``depth`` (running + queued, as the engine or, failing that, this tier sees it)
is shared by the capacity filter and the predictor.

A scrape is a picture of the past: it still shows this router's requests that finished since
(``gone``). They are taken off its ``waiting`` first (a finished request frees a batch slot,
which the head of the queue takes), then off ``running``; requests reserved after the scrape
(``after_metrics``) are added. Without that, a scrape catching the gateway's own
just-finished request queues the next one behind a ghost.

The other replicas of the tier (``others_in_flight``, from the shared state) are counted the
same way, in one number: their open requests now less those open when the scrape was first
seen (``others_since``, negative when more of theirs finished than started). One gateway
sees every reservation it makes; two that share the state would otherwise each see only
half of the requests sent since the last scrape, and both send the next one to the backend
that looked emptiest.
"""

from __future__ import annotations

import numpy as np

from routing.fleet_view import F64, FleetView, empty_view
from routing.inflight import InFlightLedger
from routing.prefilling import Prefilling

_INF = float("inf")
# A scrape another replica took reaches this one with its time converted from the wall clock
# at every snapshot (gateway/state/fleet_bridge.py), so one scrape's ``metrics_as_of`` moves by
# microseconds between snapshots: closer than this, it is the same scrape.
_SAME_SCRAPE_S = 0.005


class LoadColumns:
    def __init__(self, ledger: InFlightLedger) -> None:
        self.ledger = ledger
        self._view: FleetView = empty_view()  # until ``bind``: no rows
        self._version = -1
        self._oldest = _INF  # the oldest reservation we know of (maybe released since)
        self.open = np.zeros(0)  # reservations not yet released
        self.after_metrics = np.zeros(0)  # ...of which taken after the engine metrics' as_of
        self.gone = np.zeros(0)  # released after the metrics' as_of, reserved before it
        self._gone_since = np.zeros(0)  # the metrics' as_of ``gone`` was counted against
        self.waiting = np.zeros(0)  # engine waiting (NaN: 0) less ``gone``
        self.running = np.zeros(0)  # engine running (NaN: 0) less what ``waiting`` could not
        self.last_reserved_at = np.zeros(0)  # NaN: none open
        self.last_warmed_at = np.zeros(0)  # our latest warm-up (routing.prewarm); NaN: none
        self.local = np.zeros(0)  # max(in flight as the snapshot says, open reservations)
        self.depth = np.zeros(0)  # engine running + waiting + reserved since, else ``local``
        self.others_since = np.zeros(0)  # other replicas' open requests less at the scrape
        # Per backend: (the metrics' as_of, the other replicas' open requests when it was
        # first seen), so a rebuilt view keeps counting from the same scrape.
        self._others_at: dict[str, tuple[float, float]] = {}
        self.prefilling = Prefilling()  # our prefill work not yet in the engine's metrics
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
                self.prefilling.reserved(row, now)
            self.last_reserved_at[row] = self.ledger.last_reserved_at(backend)
            self._update(row, engine_moved=False)

    def release(self, backend: str, now: float | None = None) -> None:
        times = self.ledger.oldest(backend)
        self.ledger.release(backend, now)
        row = self._row(backend)
        if row is None or times is None:
            return
        self.open[row] -= 1
        since = self.metrics_as_of(row)
        if times > since:
            self.after_metrics[row] = max(0.0, self.after_metrics[row] - 1)
        elif now is not None and now > since:
            self.gone[row] += 1
        if now is not None:
            self.prefilling.released(row, now)
        last = self.ledger.last_reserved_at(backend)
        self.last_reserved_at[row] = np.nan if last is None else last
        self._update(row)

    def warmed(self, row: int, now: float, cold_until: float | None) -> None:
        """A warm-up was sent to ``row`` at ``now``; ``cold_until``: when the cold start it
        set off ends, if the backend was possibly cold."""
        backend = self._view.names[row]
        self.ledger.warmed(backend, now)
        if cold_until is not None:
            self.ledger.mark_warming(backend, cold_until)
        self.last_warmed_at[row] = self.ledger.warmed_at[backend]
        self.touched.add(row)

    def expire(self, now: float) -> None:
        """Let time move the prefilling sums (rows that changed are touched)."""
        self.touched.update(self.prefilling.expire(now))

    def depth_of(self, backend: str) -> float | None:
        """``backend``'s depth in the view bound last (None: not in it), whichever view a
        caller's rows belong to: a layout change moves rows."""
        row = self._view.index.get(backend)
        return None if row is None else self.depth.item(row)

    def metrics_as_of(self, row: int) -> float:
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
        self.gone = np.zeros(size)
        self._gone_since = view.metrics_as_of.copy()
        self.last_reserved_at = np.full(size, np.nan)
        self.last_warmed_at = np.full(size, np.nan)
        for backend, at in self.ledger.warmed_at.items():
            row = view.index.get(backend)
            if row is not None:
                self.last_warmed_at[row] = at
        self.prefilling.allocate(view)
        self.prefilling.recount_all(now)
        for backend in self.ledger.recently_finished():
            row = view.index.get(backend)
            if row is not None:
                self.gone[row] = self.ledger.finished_after(backend, view.metrics_as_of.item(row))
        for backend in self.ledger.busy(now):
            row = view.index.get(backend)
            if row is not None:
                self._from_ledger(row, backend, now)
        oldest = self.ledger.oldest_overall()
        self._oldest = _INF if oldest is None else oldest
        self.local = np.maximum(view.in_flight, self.open)
        self.waiting = np.maximum(view.waiting0 - self.gone, 0.0)
        self.running = np.maximum(view.running0 - np.maximum(self.gone - view.waiting0, 0.0), 0.0)
        self._others_at = {b: at for b, at in self._others_at.items() if b in view.index}
        self.others_since = np.array([self._others_growth(row) for row in range(size)])
        engine = self.running + self.waiting + self.after_metrics + self.others_since
        self.depth = np.where(view.has_metrics, np.maximum(engine, 0.0), self.local)
        self.generation += 1
        self.touched = set()

    def _derive_row(self, row: int, now: float) -> None:
        backend = self._view.names[row]
        self.open[row], self.after_metrics[row] = 0.0, 0.0
        self.last_reserved_at[row] = np.nan
        since = self._view.metrics_as_of.item(row)
        if since != self._gone_since.item(row):  # a new scrape (else kept up on release)
            self.gone[row] = self.ledger.finished_after(backend, since)
            self._gone_since[row] = since
        self._from_ledger(row, backend, now)
        self.prefilling.recount(row, now)
        self.others_since[row] = self._others_growth(row)
        self._update(row)

    def _others_growth(self, row: int) -> float:
        """The other replicas' open requests on ``row`` now less when its scrape was first
        seen (0 for a scrape seen now)."""
        view = self._view
        backend, since = view.names[row], view.metrics_as_of.item(row)
        others = view.others_in_flight.item(row)
        seen = self._others_at.get(backend)
        if seen is None or abs(since - seen[0]) > _SAME_SCRAPE_S:
            self._others_at[backend] = (since, others)
            return 0.0
        return others - seen[1]

    def _from_ledger(self, row: int, backend: str, now: float) -> None:
        self.open[row] = self.ledger.open_count(backend, now)
        since = float(self._view.metrics_as_of[row])
        self.after_metrics[row] = self.ledger.opened_after(backend, since, now)
        last = self.ledger.last_reserved_at(backend)
        self.last_reserved_at[row] = np.nan if last is None else last

    def _update(self, row: int, engine_moved: bool = True) -> None:
        """Re-derive ``row``; ``engine_moved``: its scrape or ``gone`` may have changed."""
        view = self._view
        local = max(view.in_flight.item(row), self.open.item(row))
        self.local[row] = local
        if view.has_metrics[row]:
            if engine_moved:
                gone, waiting = self.gone.item(row), view.waiting0.item(row)
                self.waiting[row] = max(waiting - gone, 0.0)
                self.running[row] = max(view.running0.item(row) - max(gone - waiting, 0.0), 0.0)
            engine = self.running.item(row) + self.waiting.item(row)
            engine += self.after_metrics.item(row) + self.others_since.item(row)
            self.depth[row] = engine if engine > 0.0 else 0.0
        else:
            self.depth[row] = local
        self.touched.add(row)

    def _row(self, backend: str) -> int | None:
        return None if self._view is None else self._view.index.get(backend)
