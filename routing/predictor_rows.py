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

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from routing.fleet_view import FleetView, Rows
from routing.learned_columns import LearnedColumns
from routing.load import LoadColumns
from routing.predictor_params import PredictorParams
from routing.row_inputs import last_active, moved_rows
from routing.step_clock import StepClock

_INF = float("inf")
_NAN = float("nan")
VECTOR_MIN_ROWS = 40  # changed rows from which ``RowTerms.sync`` recomputes them as arrays


class Evidence(NamedTuple):
    """A row's inputs to ``Prediction.capture`` that depend on no request and no clock."""

    rtt_as_of: float | None  # None: not measured
    rtt_unknown: bool  # ...and not in the region table either
    metrics_as_of: float | None  # None: no engine metrics
    learned_at: float  # NaN: nothing observed
    traffic_at: float | None  # None: not serverless, or no traffic seen
    cold_start_ms: float
    prefill_samples: float
    bias_dev_ms: float
    ratio_p90: float
    downstream_as_of: float


def _evidence(view: FleetView, learned: LearnedColumns, row: int) -> Evidence:
    traffic_at = view.last_traffic_at.item(row)
    rtt = view.rtt_ms.item(row)
    return Evidence(
        view.rtt_as_of.item(row) if view.rtt_measured.item(row) else None,
        rtt != rtt,
        view.metrics_as_of.item(row) if view.has_metrics.item(row) else None,
        learned.learned_at.item(row),
        traffic_at if traffic_at == traffic_at and view.serverless.item(row) else None,
        learned.cold_start_ms.item(row),
        learned.prefill_samples.item(row),
        learned.bias_dev_ms.item(row),
        learned.ratio_p90.item(row),
        view.downstream_as_of.item(row),
    )


class RowTerms:
    def __init__(self, params: PredictorParams) -> None:
        self.params = params
        self._view: FleetView | None = None
        self._version = -1
        self._load_generation = -1
        empty = np.zeros(0)
        self.rtt = empty  # measured, else the region table, else the configured fallbacks
        self.queue = empty
        # Score only, never the TTFT: our own reservations the learned queue scale discounts,
        # at full weight again (see ``_row``).
        self.hedge = empty
        self.hedging = False  # any row with a hedge (else the predictor skips it)
        self._hedged_rows: set[int] = set()
        self.decode = empty  # step time of the batch a request's prefill would share (0: idle)
        # rtt + queue + half a step + bias + first-token overhead: every TTFT's first sum
        self.base = empty
        self.base_and_step = empty  # base + decode: a one-step prefill's TTFT without it
        self.step_room = empty  # prefill tokens per step beside that batch
        self.itl = empty  # ITL at the batch a new request would join (long-form)
        self.others = empty  # ms a new request adds to the running batch per token it decodes
        self.batch = empty  # sequences decoding there (each pays for a new request's prefill)
        # Other clients' prefill arriving since the scrape (routing.arrivals): queued work ms
        # per second, counted for at most ``arrival_window`` seconds (until its first token).
        self.arrivals = empty
        self.arrival_window = empty
        # Their requests take batch slots: per second since the scrape, at ``slot_ms`` each
        # once the ``free_slots`` left (negative: queued already) are taken.
        self.arrival_rps = empty
        self.slot_ms = empty
        self.free_slots = empty
        self.arriving = False  # any row with arrivals (else the predictor skips the terms)
        self._arriving_rows: set[int] = set()  # ...which rows (kept per row: no array scan)
        self.idle_base = empty  # last traffic or reservation (-inf: none; +inf: never cold)
        self.cold_after = empty  # idle time where P(cold) starts to rise
        self.cold_ramp = empty  # ...and the idle time it takes to reach 1
        self.warm_until = empty  # idle_base + cold_after: when P(cold) starts to rise
        self.keep_warm_due = empty  # when an idle backend earns a keep-warm credit
        self.scaling_rows = np.zeros(0, dtype=np.intp)  # rows that scale to zero
        self.scaling_list: list[int] = []  # ...as a list (the scalar path)
        self._scaling: set[int] = set()  # ...and a set
        self.scales = False  # any backend that scales to zero
        self.min_room = 0.0
        # Row -> what a candidate's breakdown reads that no request changes (``evidence``),
        # read once per row until the row changes: a decision captures four candidates.
        self._evidence: dict[int, Evidence] = {}
        # From this many changed rows on (a new layout, a scrape of the whole fleet, a large
        # peer group's pooled estimate moving) they are recomputed as arrays: the same
        # operations in the same order as ``_row``, so the same floats
        # (tests/routing/test_row_terms.py). The arrays' ~60 calls cost what ~32-40 rows one
        # by one do on this VM (docs/results/perf-issue16.md, session 6).
        self.vector_min = VECTOR_MIN_ROWS
        # Row -> the view and load inputs ``_row`` last read (``row_inputs_key``; None: not
        # known), so a touched row whose inputs all came back is not recomputed. False: every
        # touched row is (the reference the property tests compare against, bit for bit).
        self._inputs: list[tuple[object, ...] | None] = []
        self.reuse_unmoved = True
        self.reused = 0  # touched rows found unmoved (not recomputed), since construction
        # Where each engine is in its step (routing.step_clock), set by a scorer that keeps one:
        # the candidates a decision returns have their half step replaced by the wait it tells.
        self.step_clock: StepClock | None = None

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
            rows: range | set[int] = range(len(view))
            load.drain()
        else:
            for row in view_rows:  # the view's signal times may have moved all the same
                self._evidence.pop(row, None)
            rows = self._moved(view, load, load.drain().union(view_rows))
            rows.update(learned_rows)
        self._version = view.version
        if len(rows) >= self.vector_min:
            self._rows_at_once(view, load, learned, np.array(sorted(rows), dtype=np.intp))
        else:
            for row in rows:
                self._row(view, load, learned, row)
        self.arriving = bool(self._arriving_rows)
        self.hedging = bool(self._hedged_rows)

    def _moved(self, view: FleetView, load: LoadColumns, touched: set[int]) -> set[int]:
        """The rows of ``touched`` (a new view row or a load change) whose inputs from the view
        and the load moved since ``_row`` last read them (``routing.row_inputs``). A
        reservation and its release put every input back (the chosen row of each decision),
        and an in-flight count is read only by a row without engine metrics."""
        if not self.reuse_unmoved:
            return touched
        moved, reused = moved_rows(view, load, touched, self._scaling, self._inputs)
        self.reused += reused
        return moved

    def evidence(self, view: FleetView, learned: LearnedColumns, row: int) -> Evidence:
        """``row``'s signal times and learned spreads as they stand (synced to ``view``)."""
        found = self._evidence.get(row)
        if found is None:
            found = self._evidence[row] = _evidence(view, learned, row)
        return found

    def _allocate(self, view: FleetView, load: LoadColumns) -> None:
        self._view, self._load_generation = view, load.generation
        self._evidence, self._arriving_rows, self._hedged_rows = {}, set(), set()
        size = len(view)
        self._inputs = [None] * size
        for name in (
            "rtt", "queue", "decode", "base", "base_and_step", "step_room", "itl", "others", "batch", "idle_base",
            "cold_after", "cold_ramp", "warm_until", "keep_warm_due", "arrivals", "arrival_window",
            "arrival_rps", "slot_ms", "free_slots", "hedge",
        ):  # fmt: skip
            setattr(self, name, np.zeros(size))
        # What configuration says per row, as plain lists: read once per row per change.
        home = view.fleet.gateway_region
        self._seqs = view.max_num_seqs.tolist()
        self._budget = view.step_budget.tolist()
        self._overhead = view.overhead_ms.tolist()
        self._home = [region == home for region in view.regions]
        self._home_mask = np.array(self._home, dtype=np.bool_)
        # Every prompt up to this many tokens is prefilled in one step on every backend.
        self.min_room = float((view.step_budget - view.max_num_seqs).min()) if size else 0.0
        self.scaling_rows = np.flatnonzero(view.serverless & np.isfinite(view.idle_timeout_s))
        self.scaling_list = self.scaling_rows.tolist()
        self._scaling = set(self.scaling_list)
        self.scales = len(self.scaling_list) > 0
        # A row that never scales to zero is never cold: idle since +inf, with a unit idle
        # timeout (``_cold_inputs`` writes only the rows that scale).
        ramp = self.params.cold_ramp
        self.idle_base[:] = _INF
        self.cold_after[:] = (1.0 - ramp) * 1.0
        self.cold_ramp[:] = 2.0 * ramp * 1.0
        self.warm_until[:] = _INF
        self.keep_warm_due[:] = _INF

    def _row(self, view: FleetView, load: LoadColumns, learned: LearnedColumns, row: int) -> None:
        p = self.params
        self._evidence.pop(row, None)  # every change of a row's view or learned columns
        rtt = view.rtt_ms.item(row)
        if rtt != rtt:  # NaN: neither a probe nor the region table knows
            rtt = p.same_region_rtt_ms if self._home[row] else p.unknown_rtt_ms
        seqs, depth = self._seqs[row], load.depth.item(row)
        own_ms = 0.0  # our own requests not in the metrics yet, at their predicted work
        if view.has_metrics.item(row):
            unprefilled, own_ms = load.waiting.item(row), load.prefilling.work_ms[row]
        else:
            local = load.local.item(row)
            unprefilled = local - seqs if local > seqs else 0.0
        # (Conditionals, not min/max: this runs for every changed row of every decision.)
        batch = depth if depth < seqs else seqs
        slope = p.itl_batch_slope
        decode = 0.0
        if batch:
            scale = 1.0 + slope * (batch / seqs - 0.5)
            decode = learned.step_itl_ms.item(row) * (scale if scale > 0.25 else 0.25)
        room = self._budget[row] - batch
        room = room if room > 1.0 else 1.0
        # A queued request's prefill costs its tokens at the prefill rate plus the decode
        # steps it spans. Ours are learned as a typical prefill time at the rate; the engine's
        # queue may hold anyone's, so those are taken as at least a default-sized prompt with
        # nothing cached.
        rate = learned.prefill_rate.item(row)
        with_steps = 1.0 + decode * rate / (1000.0 * room)
        typical = learned.prefill_ms.item(row)
        default = 1000.0 * p.default_prompt_tokens / rate
        per_queued = typical * with_steps
        per_waiting = (typical if typical > default else default) * with_steps
        slots_ahead = depth + 1.0 - seqs if depth + 1.0 > seqs else 0.0
        queue_scale = learned.queue_scale.item(row)
        itl_ms = learned.itl_ms.item(row)
        slot_ms = queue_scale * learned.service_ms.item(row) / seqs
        queue = slots_ahead * slot_ms + queue_scale * (unprefilled * per_waiting + own_ms)
        # The learned queue scale makes the predicted wait what requests really waited, and
        # most of our own reservations ahead turn out not to be (they share a step, or are
        # mostly done). Ranking still counts them at full weight: between scrapes they are the
        # only sign of a backend's fresh load we have (other gateways' sends are invisible),
        # and spreading on it is what keeps the tail short (issue 14, docs/learning.md).
        hedge = (1.0 - queue_scale) * own_ms if queue_scale < 1.0 else 0.0
        self.hedge[row] = hedge
        if hedge:
            self._hedged_rows.add(row)
        else:
            self._hedged_rows.discard(row)
        overhead = self._overhead[row]
        self.rtt[row], self.queue[row], self.decode[row], self.step_room[row] = (
            rtt, queue, decode, room,
        )  # fmt: skip
        base = self.base[row] = rtt + queue + 0.5 * decode + learned.bias_ms.item(row) + overhead
        self.base_and_step[row] = base + decode
        # A reservation the predictor does not describe: a typical request, ahead of later
        # ones until its first token.
        window = (0.5 * rtt + overhead + queue + per_queued) / 1000.0
        load.prefilling.window_s[row] = window
        load.prefilling.typical_ms[row] = per_queued
        others = view.others_uncached.item(row)
        arrivals = queue_scale * 1000.0 * others / rate * with_steps
        self.arrivals[row] = arrivals
        # Others' arrivals are counted at admission: ahead from there until their first token.
        self.arrival_window[row] = (queue + per_queued) / 1000.0
        rps = self.arrival_rps[row] = view.others_requests.item(row)
        if arrivals or rps:
            self._arriving_rows.add(row)
        else:
            self._arriving_rows.discard(row)
        self.slot_ms[row], self.free_slots[row] = slot_ms, seqs - depth - 1.0
        joined = depth + 1.0 if depth + 1.0 < seqs else seqs
        scale = 1.0 + slope * (joined / seqs - 0.5)
        self.itl[row] = itl_ms * (scale if scale > 0.25 else 0.25)
        # Joining a batch with room slows each of its ``batch`` sequences by a slope's share
        # of the ITL per step; a full batch is joined later, when one leaves (no net change).
        self.others[row] = batch * itl_ms * slope / seqs if depth < seqs else 0.0
        self.batch[row] = batch
        if row in self._scaling:
            self._cold_inputs(view, load, row)

    def _rows_at_once(
        self, view: FleetView, load: LoadColumns, learned: LearnedColumns, rows: Rows
    ) -> None:
        """``_row`` for every row of ``rows`` (ascending) with array operations."""
        p = self.params
        listed = rows.tolist()
        for row in listed:
            self._evidence.pop(row, None)
        where = np.where
        rtt = view.rtt_ms[rows]
        fallback = where(self._home_mask[rows], p.same_region_rtt_ms, p.unknown_rtt_ms)
        rtt = where(rtt != rtt, fallback, rtt)
        seqs, depth = view.max_num_seqs[rows], load.depth[rows]
        metrics, local = view.has_metrics[rows], load.local[rows]
        work = load.prefilling.work_ms
        own_ms = where(metrics, np.array([work[row] for row in listed]), 0.0)
        unprefilled = where(metrics, load.waiting[rows], where(local > seqs, local - seqs, 0.0))
        batch = where(depth < seqs, depth, seqs)
        slope = p.itl_batch_slope
        scale = 1.0 + slope * (batch / seqs - 0.5)
        decode = where(
            batch != 0.0, learned.step_itl_ms[rows] * where(scale > 0.25, scale, 0.25), 0.0
        )
        room = view.step_budget[rows] - batch
        room = where(room > 1.0, room, 1.0)
        rate = learned.prefill_rate[rows]
        with_steps = 1.0 + decode * rate / (1000.0 * room)
        typical = learned.prefill_ms[rows]
        default = 1000.0 * p.default_prompt_tokens / rate
        per_queued = typical * with_steps
        per_waiting = where(typical > default, typical, default) * with_steps
        slots_ahead = where(depth + 1.0 > seqs, depth + 1.0 - seqs, 0.0)
        queue_scale, itl_ms = learned.queue_scale[rows], learned.itl_ms[rows]
        slot_ms = queue_scale * learned.service_ms[rows] / seqs
        queue = slots_ahead * slot_ms + queue_scale * (unprefilled * per_waiting + own_ms)
        hedge = where(queue_scale < 1.0, (1.0 - queue_scale) * own_ms, 0.0)
        self.hedge[rows] = hedge
        self._hedged_rows.difference_update(listed)
        self._hedged_rows.update(rows[hedge != 0.0].tolist())
        overhead = view.overhead_ms[rows]
        self.rtt[rows], self.queue[rows], self.decode[rows], self.step_room[rows] = (
            rtt, queue, decode, room,
        )  # fmt: skip
        base = rtt + queue + 0.5 * decode + learned.bias_ms[rows] + overhead
        self.base[rows] = base
        self.base_and_step[rows] = base + decode
        window = (0.5 * rtt + overhead + queue + per_queued) / 1000.0
        window_s, typical_ms = load.prefilling.window_s, load.prefilling.typical_ms
        for row, window_row, per_queued_row in zip(
            listed, window.tolist(), per_queued.tolist(), strict=True
        ):
            window_s[row], typical_ms[row] = window_row, per_queued_row
        arrivals = queue_scale * 1000.0 * view.others_uncached[rows] / rate * with_steps
        self.arrivals[rows] = arrivals
        self.arrival_window[rows] = (queue + per_queued) / 1000.0
        rps = view.others_requests[rows]
        self.arrival_rps[rows] = rps
        self._arriving_rows.difference_update(listed)
        self._arriving_rows.update(rows[(arrivals != 0.0) | (rps != 0.0)].tolist())
        self.slot_ms[rows], self.free_slots[rows] = slot_ms, seqs - depth - 1.0
        joined = where(depth + 1.0 < seqs, depth + 1.0, seqs)
        scale = 1.0 + slope * (joined / seqs - 0.5)
        self.itl[rows] = itl_ms * where(scale > 0.25, scale, 0.25)
        self.others[rows] = where(depth < seqs, batch * itl_ms * slope / seqs, 0.0)
        self.batch[rows] = batch
        for row in listed:
            if row in self._scaling:
                self._cold_inputs(view, load, row)

    def batch_scale(self, batch: float, seqs: float) -> float:
        """ITL at ``batch`` running over ITL at a half-full batch."""
        return max(1.0 + self.params.itl_batch_slope * (batch / seqs - 0.5), 0.25)

    def _cold_inputs(self, view: FleetView, load: LoadColumns, row: int) -> None:
        """The cold-start inputs of a row that scales to zero."""
        p = self.params
        ramp = p.cold_ramp
        timeout = view.idle_timeout_s.item(row)
        base = last_active(view, load, row)
        cold_after = (1.0 - ramp) * timeout
        self.idle_base[row], self.cold_after[row] = base, cold_after
        self.cold_ramp[row] = 2.0 * ramp * timeout
        # +inf (never cold) and -inf (never seen active) stay infinite: never earn the credit.
        self.warm_until[row] = base + cold_after
        self.keep_warm_due[row] = base + p.keep_warm_after * timeout
