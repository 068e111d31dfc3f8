"""The request-independent part of every backend's prediction, kept current row by row.

RTT, queue wait, the engine step a request's prefill shares with the decoding batch, ITL at
the batch a request would join, and the inputs of the cold-start ramp depend on the snapshot,
on local reservations and on what was learned, but not on the request or the clock. Between
two decisions only a few rows change (the backend just chosen, the one a finished request
left, the one a snapshot refresh rewrote), so those rows are recomputed with scalar
arithmetic and everything else is reused: a decision then costs a few vector operations
whatever the fleet size. The formulas below are the queue, step and RTT terms of the
predictor.

The engine model (continuous batching with chunked prefill, as vLLM schedules): every step
decodes one token for each running sequence and fills the rest of its token budget with
prefill chunks, first come first served. A step costs ``decode(R)`` for a batch of ``R`` plus
its prefill tokens at the prefill rate. So a new request on a busy engine waits for the rest
of the step in progress (half a step on average), then for the prefill queued ahead of it,
and its own prefill spans ``ceil(uncached / (budget - R))`` steps, each also paying
``decode(R)``. ``decode(R)`` is the configured ITL (of a half-full batch) times the learned
step scale, scaled by the batch: ``itl x max(1 + slope x (R / max_num_seqs - 1/2), 1/4)``.
(The observed ITL is not used for it: it includes other requests' prefill chunks, which the
queue term counts; it is what long-form output is predicted with.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from routing.fleet_view import FleetView
from routing.learned_columns import LearnedColumns
from routing.load import LoadColumns
from routing.predictor_params import PredictorParams

_INF = float("inf")
_NAN = float("nan")


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
        self.decode = empty  # step time of the batch a request's prefill would share (0: idle)
        self.step_room = empty  # prefill tokens per step beside that batch
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
        for name in (
            "rtt", "queue", "rtt_queue", "decode", "step_room", "itl", "idle_base", "cold_after",
            "cold_ramp",
        ):  # fmt: skip
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
        own_ms = 0.0  # our own requests not in the metrics yet, at their predicted work
        if view.has_metrics[row]:
            unprefilled = load.waiting.item(row)
            own_ms = load.prefilling.work_ms.item(row)
        else:
            unprefilled = max(load.local.item(row) - seqs, 0.0)
        batch = min(depth, seqs)
        decode = learned.step_itl_ms.item(row) * self.batch_scale(batch, seqs) if batch else 0.0
        room = max(view.step_budget.item(row) - batch, 1.0)
        # A queued request's prefill costs its tokens at the prefill rate plus the decode
        # steps it spans. Ours are learned as a typical prefill time at the rate; the engine's
        # queue may hold anyone's, so those are taken as at least a default-sized prompt with
        # nothing cached.
        rate = learned.prefill_rate.item(row)
        with_steps = 1.0 + decode * rate / (1000.0 * room)
        typical = learned.prefill_ms.item(row)
        per_queued = typical * with_steps
        per_waiting = max(typical, 1000.0 * p.default_prompt_tokens / rate) * with_steps
        slots_ahead = max(depth + 1.0 - seqs, 0.0)
        queue = learned.queue_scale.item(row) * (
            slots_ahead * learned.service_ms.item(row) / seqs + unprefilled * per_waiting + own_ms
        )
        self.rtt[row], self.queue[row], self.rtt_queue[row] = rtt, queue, rtt + queue
        self.decode[row], self.step_room[row] = decode, room
        # A reservation the predictor does not describe: a typical request, ahead of later
        # ones until its first token.
        engine_ms = view.overhead_ms.item(row) + queue + per_queued + 0.5 * decode
        load.prefilling.window_s[row] = (0.5 * rtt + engine_ms) / 1000.0
        load.prefilling.typical_ms[row] = per_queued
        self.itl[row] = learned.itl_ms.item(row) * self.batch_scale(min(depth + 1.0, seqs), seqs)
        self._cold_inputs(view, load, row)

    def batch_scale(self, batch: float, seqs: float) -> float:
        """ITL at ``batch`` running over ITL at a half-full batch."""
        return max(1.0 + self.params.itl_batch_slope * (batch / seqs - 0.5), 0.25)

    def _cold_inputs(self, view: FleetView, load: LoadColumns, row: int) -> None:
        ramp = self.params.cold_ramp
        timeout = view.idle_timeout_s.item(row)
        if not (view.serverless[row] and timeout < _INF):
            self.idle_base[row], timeout = _INF, 1.0  # idle is -inf: P(cold) is 0
        else:
            # Our last traffic or reservation, or a scrape showing the engine running
            # sequences then, whoever's they were. Waiting alone is not activity: a waking
            # engine queues everything until its cold start is over.
            busy = view.running0.item(row) > 0
            seen = (
                view.last_traffic_at.item(row),
                load.last_reserved_at.item(row),
                view.metrics_as_of.item(row) if busy else _NAN,
            )
            last = max((at for at in seen if at == at), default=_NAN)
            self.idle_base[row] = -_INF if last != last else last
        self.cold_after[row] = (1.0 - ramp) * timeout
        self.cold_ramp[row] = 2.0 * ramp * timeout
