"""Predicted time to first token per candidate, as named terms with signal ages and spreads.

    TTFT = rtt + queue + prefill(uncached) + step + P(cold) x cold_start + downstream + bias
           + first_token_overhead

``step`` is what a busy engine adds around the prefill: the rest of the step in progress and
the decoding batch's share of every step the prefill spans (see ``predictor_rows``). The rest
of the step in progress is half a step for ranking; the candidates a decision returns have it
from the engine's step clock where the gateway sees that engine's steps end
(``routing.step_clock``: the phase was most of the median error where a step is a large share
of the TTFT).

``downstream`` is for gateway-kind backends (another Meridian): what that gateway reports for
its best local backend for the model, which replaces our own queue and cold-start guesses.
Every term is non-decreasing in queue depth, in uncached tokens and in the downstream report,
so a longer queue never lowers the prediction and a longer cached prefix never raises it.

Only what ranking needs is computed for every backend, as a few vector operations over
``RowTerms`` (the request-independent terms, kept current row by row). Spreads (1-sigma per
term, growing with the age of the term's signal), ages and the p90 are computed for the few
candidates a decision returns (``Prediction.detail``). The p90 combines the spreads
(independent terms) and never falls below the backend's learned p90 of actual/predicted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from routing.answer_score import with_answer
from routing.fleet_view import F64, FleetView, Rows
from routing.learned_columns import LearnedColumns
from routing.load import LoadColumns
from routing.predictor_detail import CONFIGURED, TERMS, RowInputs
from routing.predictor_params import PredictorParams
from routing.predictor_rows import Evidence, RowTerms
from routing.quick_init import quick_init
from routing.step_clock import phased
from routing.types import LatencyClass, RequestProfile

_STEP = TERMS.index("step")
_NEW_TUPLE = tuple.__new__

__all__ = [
    "CONFIGURED", "TERMS", "Prediction", "PredictorParams", "RowInputs", "placement_column",
    "predict", "row_inputs",
]  # fmt: skip


@quick_init
@dataclass(frozen=True, slots=True, eq=False)
class Prediction:
    """Terms of every row of the view; valid until the router's next decision."""

    rows: Rows  # the eligible rows ``score`` is aligned with
    score: F64  # TTFT, or end-to-end time for long-form requests
    ttft_ms: F64  # the rest are aligned with the view's rows
    e2e_ms: F64 | None
    terms_ms: tuple[F64, ...]  # in TERMS order (``step`` without the half step in ``base``)
    decode: F64  # half of it is the rest of the step in progress (in every TTFT's base)
    cached: Mapping[int, float]  # row -> cached prompt tokens, for rows holding any
    cold_prob: F64 | None  # None: no backend scales to zero
    reports: Mapping[int, float]  # gateway rows whose remote reported a TTFT for the model
    placement: F64 | None  # the request's region penalty per row (in the score only)
    view: FleetView
    learned: LearnedColumns
    now: float
    params: PredictorParams
    row_terms: RowTerms  # synced to ``view``: the rows' request-independent evidence

    def term(self, name: str, row: int) -> float:
        at = TERMS.index(name)
        value: float = self.terms_ms[at].item(row)
        return value + 0.5 * self.decode.item(row) if at == _STEP else value

    def terms_at(self, row: int) -> tuple[float, ...]:
        rtt, queue, prefill, step, cold, downstream, bias, overhead = self.terms_ms
        return (
            rtt.item(row), queue.item(row), prefill.item(row),
            step.item(row) + 0.5 * self.decode.item(row), cold.item(row), downstream.item(row),
            bias.item(row), overhead.item(row),
        )  # fmt: skip

    def capture(self, row: int) -> RowInputs:
        """Everything ``row``'s breakdown needs, read now: the columns move on later."""
        terms, ttft = phased(
            self.row_terms.step_clock, self.view.names[row], self.now, self.terms_at(row),
            self.ttft_ms.item(row), self.decode.item(row),
        )  # fmt: skip
        return row_inputs(
            self.row_terms.evidence(self.view, self.learned, row),
            terms,
            ttft,
            self.now,
            0.0 if self.cold_prob is None else self.cold_prob.item(row),
            row in self.reports,
            0.0 if self.placement is None else self.placement.item(row),
            self.params,
        )


def row_inputs(
    evidence: Evidence,
    terms: tuple[float, ...],
    ttft_ms: float,
    now: float,
    cold_prob: float,
    reported: bool,
    placement_ms: float,
    params: PredictorParams,
) -> RowInputs:
    """A row's breakdown inputs from its request-independent ``evidence`` and this request's
    terms (``Prediction.capture`` and the scalar path's)."""
    rtt_at, rtt_unknown, metrics_at, learned_at, traffic_at, cold_ms, samples, dev, p90, down_at = (
        evidence
    )  # fmt: skip
    # tuple.__new__: RowInputs' own __new__ (a Python function) costs 2.5x as much
    return _NEW_TUPLE(RowInputs, (
        terms,
        ttft_ms,
        None if rtt_at is None else now - rtt_at,
        rtt_unknown,
        None if metrics_at is None else now - metrics_at,
        CONFIGURED if learned_at != learned_at else now - learned_at,
        CONFIGURED if traffic_at is None else now - traffic_at,
        cold_prob,
        cold_ms,
        now - down_at if reported else None,
        samples,
        dev,
        p90,
        params.stale_after_s,
        placement_ms,
        params.evidence_horizon_s,
    ))  # fmt: skip


def _downstream(view: FleetView, model: str) -> dict[int, float]:
    """Gateway-kind rows whose remote reports a TTFT for ``model``."""
    found: dict[int, float] = {}
    for row in view.gateway_rows:
        report = view.downstream_ttft[row]
        ms = None if report is None else report.get(model)
        if ms is not None:
            found[row] = max(float(ms), 0.0)
    return found


def placement_column(view: FleetView, penalty_ms: Mapping[str, float]) -> F64 | None:
    """The request's soft region preference as a per-row penalty (None: no preference)."""
    if not penalty_ms:
        return None
    key = ("placement", tuple(sorted(penalty_ms.items())))
    column = view.remember(key, lambda: np.array([penalty_ms.get(r, 0.0) for r in view.regions]))
    return column


def _cold(
    view: FleetView, now: float, load: LoadColumns, learned: LearnedColumns, rt: RowTerms
) -> tuple[F64, F64] | None:
    if not rt.scales:
        return None
    ramp = np.minimum(np.maximum((now - rt.idle_base - rt.cold_after) / rt.cold_ramp, 0.0), 1.0)
    cold = ramp * learned.cold_start_ms
    warming = load.warming_ms(view, now)
    if warming is not None:
        cold = np.maximum(cold, warming)
    return cold, ramp


def predict(
    view: FleetView,
    rows: Rows,
    profile: RequestProfile,
    now: float,
    cached: Mapping[int, float],
    load: LoadColumns,
    learned: LearnedColumns,
    rt: RowTerms,
) -> Prediction:
    """Predict every row (cheap vector work); ``rt`` must be synced to this view first."""
    prompt, rate, room = profile.prompt_tokens, learned.prefill_rate, rt.step_room
    prefill = (1000.0 * prompt) / rate
    one_step = prompt <= rt.min_room  # the common case: every prefill fits in one step
    step = rt.decode if one_step else np.ceil(np.divide(float(max(prompt, 1)), room))
    for row, tokens in cached.items():
        uncached = max(prompt - tokens, 0.0)
        prefill[row] = 1000.0 * uncached / rate.item(row)
        if not one_step:
            step[row] = math.ceil(max(uncached, 1.0) / room.item(row))
    if not one_step:
        np.multiply(step, rt.decode, out=step)  # the steps the prefill spans, each paying decode
    zeros = view.remember("zeros", lambda: np.zeros(len(view)))
    queue, base, decode = rt.queue, rt.base, rt.decode
    if rt.arriving:  # other clients' prefill since the scrape, still ahead (routing.arrivals)
        since = np.maximum(now - view.metrics_as_of, 0.0)
        ahead = rt.arrivals * np.minimum(since, rt.arrival_window)
        free = rt.free_slots  # others' requests since hold their slots: seconds, not ms
        taken = np.maximum(rt.arrival_rps * since - free, 0.0) - np.maximum(-free, 0.0)
        ahead += rt.slot_ms * taken
        queue, base = queue + ahead, base + ahead
    cold_and_prob = _cold(view, now, load, learned, rt)
    cold, prob = (zeros, None) if cold_and_prob is None else cold_and_prob
    downstream = zeros
    reports = _downstream(view, profile.model) if view.gateway_rows else {}
    if reports:  # the remote's report replaces our queue, step and cold-start guesses
        queue, base, decode = queue.copy(), base.copy(), decode.copy()
        step = decode if one_step else step
        cold, downstream = cold.copy(), zeros.copy()
        for row, ms in reports.items():
            base[row] -= queue[row] + 0.5 * decode[row]
            queue[row], cold[row], downstream[row], decode[row] = 0.0, 0.0, ms, 0.0
            step[row] = 0.0
    # base: rtt + queue + half a step + bias + first-token overhead
    if base is rt.base and step is rt.decode:  # nothing request-dependent in either
        ttft = rt.base_and_step + prefill
    else:
        ttft = base + prefill
        ttft += step
    if cold is not zeros:
        ttft += cold
    if reports:
        ttft += downstream
    np.maximum(ttft, 0.0, out=ttft)
    e2e = None
    p = rt.params
    max_tokens = profile.max_tokens
    output = max_tokens if max_tokens is not None else p.default_output_tokens
    if profile.latency_class is LatencyClass.LONG_FORM:
        e2e = ttft + rt.itl * output
    full = ttft if e2e is None else e2e
    # The whole answer: what this request's decode costs itself and the batch it joins.
    full = with_answer(full, ttft, prefill, rows, output, e2e is not None, rt)
    placement = placement_column(view, profile.region_penalty_ms)
    if placement is not None:
        full = full + placement
    if rt.hedging:  # our own reservations the learned queue scale discounts (score only)
        full = full + rt.hedge
    return Prediction(
        rows=rows,
        score=full if len(rows) == len(view) else full[rows],
        ttft_ms=ttft,
        e2e_ms=e2e,
        terms_ms=(
            rt.rtt,
            queue,
            prefill,
            step,
            cold,
            downstream,
            learned.bias_ms,
            view.overhead_ms,
        ),
        decode=decode,
        cached=cached,
        cold_prob=prob,
        reports=reports,
        placement=placement,
        view=view,
        learned=learned,
        now=now,
        params=rt.params,
        row_terms=rt,
    )
