"""``predict`` for a few rows with Python floats: the scalar decision path's predictor.

For a fleet of a few backends numpy's per-call cost, not the arithmetic, is the decision: a
vector operation on a one-element array costs as much as on a hundred, and after an idle gap
(a gateway at concurrency 1) each distinct one costs 5-30 us. So ``predict_rows`` computes
what ``routing.predictor.predict`` computes, row by row, reading ``RowTerms`` (the
request-independent terms, kept current either way) one value at a time.

It is the same formula in the same order of operations, so every value is the same float:
tests/routing/test_fused_ttft.py drives the scalar path beside the generic pipeline over
random fleets and requests and requires equal decisions. Gateway-kind backends (downstream
reports) never come here: the fused router sends any fleet with one to the generic path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from routing.fleet_view import FleetView
from routing.learned_columns import LearnedColumns
from routing.load import LoadColumns
from routing.predictor import placement_column
from routing.predictor_params import PredictorParams
from routing.predictor_rows import RowTerms
from routing.types import LatencyClass, RequestProfile

_INF = float("inf")


class RowPrediction(NamedTuple):
    """One eligible row's prediction (what ``Prediction`` holds for it)."""

    row: int
    score: float  # TTFT, or end-to-end time for long-form requests (+ decode, placement)
    ttft_ms: float
    e2e_ms: float | None
    terms: tuple[float, ...]  # in TERMS order, ``step`` with the half step (``terms_at``)
    cold_prob: float  # 0: nothing here scales to zero
    placement_ms: float


def _maximum(a: float, b: float) -> float:
    """``np.maximum`` of two floats (a NaN wins, as there)."""
    return a if a >= b or a != a else b


def _minimum(a: float, b: float) -> float:
    return a if a <= b or a != a else b


def predict_rows(
    view: FleetView,
    rows: Sequence[int],
    profile: RequestProfile,
    now: float,
    cached: Mapping[int, float],
    load: LoadColumns,
    learned: LearnedColumns,
    rt: RowTerms,
) -> list[RowPrediction]:
    """``predict`` for ``rows`` (no gateway-kind row); ``rt`` must be synced to this view."""
    prompt = profile.prompt_tokens
    one_step = prompt <= rt.min_room
    p = rt.params
    max_tokens = profile.max_tokens
    output = max_tokens if max_tokens is not None else p.default_output_tokens
    long_form = profile.latency_class is LatencyClass.LONG_FORM
    own = 0.0 if long_form else p.interactive_decode_weight
    others_weight, chunks = p.others_decode_weight, p.others_prefill_weight
    decode_cost = own > 0.0 or others_weight > 0.0 or chunks > 0.0
    placement = placement_column(view, profile.region_penalty_ms)
    scales, arriving = rt.scales, rt.arriving
    warming: dict[int, float] = {}
    if scales:  # what LoadColumns.warming_ms reads (and expires), by row
        index = view.index
        for backend, left_ms in load.ledger.warming(now).items():
            at = index.get(backend)
            if at is not None:
                warming[at] = left_ms
    whole = 1000.0 * prompt
    out: list[RowPrediction] = []
    extra: list[float] = []  # the answer's decode terms (when weighed)
    for row in rows:
        rate = learned.prefill_rate.item(row)
        decode = rt.decode.item(row)
        tokens = cached.get(row)
        if tokens is None:
            prefill = whole / rate
            uncached = float(max(prompt, 1))
        else:
            uncached = max(prompt - tokens, 0.0)
            prefill = 1000.0 * uncached / rate
            uncached = max(uncached, 1.0)
        step = decode if one_step else math.ceil(uncached / rt.step_room.item(row)) * decode
        queue, base = rt.queue.item(row), rt.base.item(row)
        if arriving:  # other clients' prefill since the scrape (see predict)
            since = _maximum(now - view.metrics_as_of.item(row), 0.0)
            ahead = rt.arrivals.item(row) * _minimum(since, rt.arrival_window.item(row))
            free = rt.free_slots.item(row)
            taken = _maximum(rt.arrival_rps.item(row) * since - free, 0.0) - _maximum(-free, 0.0)
            ahead += rt.slot_ms.item(row) * taken
            queue, base = queue + ahead, base + ahead
        if arriving or not one_step:
            ttft = base + prefill
            ttft += step
        else:
            ttft = rt.base_and_step.item(row) + prefill
        cold = ramp = 0.0
        if scales:
            since_idle = now - rt.idle_base.item(row) - rt.cold_after.item(row)
            ramp = _minimum(_maximum(since_idle / rt.cold_ramp.item(row), 0.0), 1.0)
            cold = ramp * learned.cold_start_ms.item(row)
            if warming:
                cold = _maximum(cold, warming.get(row, 0.0))
            ttft += cold
        ttft = _maximum(ttft, 0.0)
        e2e = ttft + rt.itl.item(row) * output if long_form else None
        if decode_cost:
            more = output * (own * rt.itl.item(row) + others_weight * rt.others.item(row))
            if chunks > 0.0:  # the batch waits for its prefill (answer_score)
                more = more + chunks * rt.batch.item(row) * prefill
            extra.append(more)
        terms = (
            rt.rtt.item(row), queue, prefill, step + 0.5 * decode, cold, 0.0,
            learned.bias_ms.item(row), view.overhead_ms.item(row),
        )  # fmt: skip
        placed = 0.0 if placement is None else placement.item(row)
        out.append(RowPrediction(row, ttft if e2e is None else e2e, ttft, e2e, terms, ramp, placed))
    if decode_cost:
        answer = _answer(out, extra, long_form or p.interactive_ttft_slack_ms == _INF, p)
        out = [one._replace(score=one.score + more) for one, more in zip(out, answer, strict=True)]
    if placement is not None:
        out = [one._replace(score=one.score + one.placement_ms) for one in out]
    if rt.hedging:  # our own reservations the learned queue scale discounts (see predict)
        hedge = rt.hedge
        out = [one._replace(score=one.score + hedge.item(one.row)) for one in out]
    return out


def _answer(
    rows: list[RowPrediction], extra: list[float], unbounded: bool, p: PredictorParams
) -> list[float]:
    """``routing.answer_score.with_answer``'s decode terms per row: all of ``extra``, or with
    the interactive slack, relative to the cheapest within it (past it: its own or the
    dearest within's, the larger)."""
    if unbounded:
        return extra
    bound = min(one.ttft_ms for one in rows) + p.interactive_ttft_slack_ms
    within = [one.ttft_ms <= bound for one in rows]
    kept = [more for more, inside in zip(extra, within, strict=True) if inside]
    floor, top = min(kept), max(kept)
    return [
        more - floor if inside else max(more, top) - floor
        for more, inside in zip(extra, within, strict=True)
    ]
