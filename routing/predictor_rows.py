"""The request-independent part of every backend's prediction, kept current row by row.

RTT, queue wait, ITL at the batch a request would join, and the inputs of the cold-start ramp
depend on the snapshot, on local reservations and on what was learned, but not on the request
or the clock. Between two decisions only a few rows change (the backend just chosen, the one a
finished request left, the one a snapshot refresh rewrote), so those rows are recomputed with
scalar arithmetic and everything else is reused: a decision then costs a few vector operations
whatever the fleet size. The formulas below are the queue and RTT terms of the predictor.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from routing.fleet_view import FleetView
from routing.learned_columns import LearnedColumns
from routing.load import LoadColumns
from routing.predictor_params import PredictorParams

_INF = float("inf")


class RowTerms:
    def __init__(self, params: PredictorParams) -> None:
        self.params = params
        self._view: FleetView | None = None
        self._version = -1
        self._load_generation = -1
        empty = np.zeros(0)
        self.rtt = empty  # measured, else the region table, else the configured fallbacks
        self.queue = empty
        self.rtt_queue = empty  # rtt + queue: the first partial sum of every TTFT
        self.itl = empty  # ITL at the batch a new request would join (long-form)
        self.idle_base = empty  # last traffic or reservation (-inf: none; +inf: never cold)
        self.cold_after = empty  # idle time where P(cold) starts to rise
        self.cold_ramp = empty  # ...and the idle time it takes to reach 1
        self.scales = False  # any backend that scales to zero

    def sync(
        self,
        view: FleetView,
        load: LoadColumns,
        learned: LearnedColumns,
        learned_rows: Sequence[int] | None,
    ) -> None:
        view_rows = None if self._view is not view else view.changed_since(self._version)
        if view_rows is None or learned_rows is None or load.generation != self._load_generation:
            self._allocate(view, load)
            rows: Iterable[int] = range(len(view))
            load.drain()
        else:
            rows = load.drain().union(view_rows, learned_rows)
        self._version = view.version
        for row in rows:
            self._row(view, load, learned, row)

    def _allocate(self, view: FleetView, load: LoadColumns) -> None:
        self._view, self._load_generation = view, load.generation
        size = len(view)
        for name in ("rtt", "queue", "rtt_queue", "itl", "idle_base", "cold_after", "cold_ramp"):
            setattr(self, name, np.zeros(size))
        self.scales = bool((view.serverless & np.isfinite(view.idle_timeout_s)).any())

    def _row(self, view: FleetView, load: LoadColumns, learned: LearnedColumns, row: int) -> None:
        p = self.params
        rtt = view.rtt_ms.item(row)
        if rtt != rtt:  # NaN: neither a probe nor the region table knows
            home = view.regions[row] == view.fleet.gateway_region
            rtt = p.same_region_rtt_ms if home else p.unknown_rtt_ms
        seqs = view.max_num_seqs.item(row)
        depth = load.depth.item(row)
        if view.has_metrics[row]:
            unprefilled = view.waiting0.item(row) + load.after_metrics.item(row)
        else:
            unprefilled = max(load.local.item(row) - seqs, 0.0)
        slots_ahead = max(depth + 1.0 - seqs, 0.0)
        queue = learned.queue_scale.item(row) * (
            slots_ahead * learned.service_ms.item(row) / seqs
            + unprefilled * learned.prefill_ms.item(row)
        )
        self.rtt[row], self.queue[row], self.rtt_queue[row] = rtt, queue, rtt + queue
        batch = min(depth / seqs, 1.0)
        self.itl[row] = learned.itl_ms.item(row) * (1.0 + p.itl_batch_slope * batch)
        self._cold_inputs(view, load, row)

    def _cold_inputs(self, view: FleetView, load: LoadColumns, row: int) -> None:
        ramp = self.params.cold_ramp
        timeout = view.idle_timeout_s.item(row)
        if not (view.serverless[row] and timeout < _INF):
            self.idle_base[row], timeout = _INF, 1.0  # idle is -inf: P(cold) is 0
        else:
            last = np.fmax(view.last_traffic_at[row], load.last_reserved_at[row]).item()
            self.idle_base[row] = -_INF if last != last else last
        self.cold_after[row] = (1.0 - ramp) * timeout
        self.cold_ramp[row] = 2.0 * ramp * timeout
