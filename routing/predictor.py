"""Predicted time to first token per candidate, as named terms with signal ages and spreads.

    TTFT = rtt + queue + prefill(uncached) + P(cold) x cold_start + bias + first_token_overhead

All arrays are aligned with ``rows`` (the candidates that passed the filters). Every term is
non-decreasing in queue depth and in uncached tokens, so a longer queue never lowers the
prediction and a longer cached prefix never raises it. Spreads are 1-sigma per term; they grow
with the age of the term's signal, and the p90 combines them (independent terms) and never
falls below the backend's learned p90 of actual/predicted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from routing.fleet_view import F64, FleetView, Rows
from routing.learned_columns import LearnedColumns
from routing.load import LoadColumns
from routing.types import LatencyClass, RequestProfile

TERMS = ("rtt", "queue", "prefill", "cold_start", "bias", "first_token_overhead")
CONFIGURED = -1.0  # signal age of a term that comes from configuration, not observation
Z90 = 1.2815515655446004


@dataclass(frozen=True, slots=True)
class PredictorParams:
    same_region_rtt_ms: float = 1.0  # when neither a probe nor the region table knows
    unknown_rtt_ms: float = 100.0
    default_output_tokens: int = 256  # long-form requests without max_tokens
    default_prompt_tokens: int = 1000  # prefill of a typical queued request, until learned
    stale_after_s: float = 5.0  # a signal this old has its spread doubled
    cold_ramp: float = 0.1  # P(cold) ramps from (1-r) to (1+r) x idle timeout
    itl_batch_slope: float = 1.0  # ITL at a full batch = ITL x (1 + slope)


@dataclass(frozen=True, slots=True)
class Prediction:
    terms_ms: dict[str, F64]
    age_s: dict[str, F64]
    spread_ms: dict[str, F64]
    ttft_ms: F64
    ttft_p90_ms: F64
    e2e_ms: F64 | None
    cached_tokens: F64
    score: F64  # TTFT, or end-to-end time for long-form requests


def _staleness(age: F64, stale_after_s: float) -> F64:
    result: F64 = 1.0 + np.maximum(age, 0.0) / stale_after_s
    return result


def _rtt(view: FleetView, rows: Rows, now: float, p: PredictorParams) -> tuple[F64, F64, F64]:
    rtt = view.rtt_ms[rows]
    measured = view.rtt_measured[rows]
    unknown = np.isnan(rtt)
    if unknown.any():
        home = view.fleet.gateway_region
        fill = [p.same_region_rtt_ms if view.regions[r] == home else p.unknown_rtt_ms for r in rows]
        rtt = np.where(unknown, np.asarray(fill, dtype=np.float64), rtt)
    age = np.where(measured, now - view.rtt_as_of[rows], CONFIGURED)
    rel = np.where(measured, 0.1 * _staleness(age, p.stale_after_s), np.where(unknown, 0.5, 0.25))
    return rtt, age, rel * rtt


def _queue(
    view: FleetView,
    rows: Rows,
    now: float,
    load: LoadColumns,
    learned: LearnedColumns,
    p: PredictorParams,
) -> tuple[F64, F64, F64, F64]:
    """Queue wait: slots to free before ours, plus prefill of what is queued ahead of us."""
    seqs = view.max_num_seqs[rows]
    has_metrics = view.has_metrics[rows]
    waiting = view.waiting0[rows]
    pending = load.after_metrics[rows]
    local = np.maximum(view.in_flight[rows], load.open[rows])
    depth = np.where(has_metrics, view.running0[rows] + waiting + pending, local)
    unprefilled = np.where(has_metrics, waiting + pending, np.maximum(local - seqs, 0.0))
    slots_ahead = np.maximum(depth + 1.0 - seqs, 0.0)
    queue = learned.queue_scale[rows] * (
        slots_ahead * learned.service_ms[rows] / seqs + unprefilled * learned.prefill_ms[rows]
    )
    age = np.where(has_metrics, now - view.metrics_as_of[rows], 0.0)
    rel = np.where(has_metrics, 0.2 * _staleness(age, p.stale_after_s), 0.5)
    return queue, age, rel * queue, depth


def _cold(
    view: FleetView,
    rows: Rows,
    now: float,
    load: LoadColumns,
    learned: LearnedColumns,
    p: PredictorParams,
) -> tuple[F64, F64]:
    timeout = view.idle_timeout_s[rows]
    scales = view.serverless[rows] & np.isfinite(timeout)
    cold_ms = learned.cold_start_ms[rows]
    if not scales.any():
        zero = np.zeros(len(rows))
        return zero, zero
    last = np.fmax(view.last_traffic_at[rows], load.last_reserved_at[rows])
    idle = np.where(np.isnan(last), np.inf, now - last)
    timeout = np.where(scales, timeout, 1.0)  # keeps inf - inf (a NaN) out of the ramp
    ramp = np.clip((idle - (1.0 - p.cold_ramp) * timeout) / (2.0 * p.cold_ramp * timeout), 0, 1)
    prob = np.where(scales, ramp, 0.0)
    cold = prob * cold_ms
    warming = load.warming_ms(view, now)
    if warming is not None:
        cold = np.maximum(cold, warming[rows])
    return cold, cold_ms * np.sqrt(prob * (1.0 - prob)) + 0.2 * cold


def _ages(
    view: FleetView, rows: Rows, now: float, learned: LearnedColumns, rtt_age: F64, queue_age: F64
) -> dict[str, F64]:
    learned_at = learned.learned_at[rows]
    learned_age = np.where(np.isnan(learned_at), CONFIGURED, now - learned_at)
    traffic_age = now - view.last_traffic_at[rows]
    known = view.serverless[rows] & ~np.isnan(traffic_age)
    return {
        "rtt": rtt_age,
        "queue": queue_age,
        "prefill": learned_age,
        "cold_start": np.where(known, traffic_age, CONFIGURED),
        "bias": learned_age,
        "first_token_overhead": np.full(len(rows), CONFIGURED),
    }


def _end_to_end(
    view: FleetView,
    rows: Rows,
    profile: RequestProfile,
    ttft: F64,
    depth: F64,
    learned: LearnedColumns,
    params: PredictorParams,
) -> F64:
    """TTFT + ITL x expected output tokens, ITL growing with the batch the request joins."""
    output = profile.max_tokens if profile.max_tokens is not None else params.default_output_tokens
    batch = np.minimum(depth / view.max_num_seqs[rows], 1.0)
    itl = learned.itl_ms[rows] * (1.0 + params.itl_batch_slope * batch)
    e2e: F64 = ttft + itl * output
    return e2e


def predict(
    view: FleetView,
    rows: Rows,
    profile: RequestProfile,
    now: float,
    cached_tokens: F64,
    load: LoadColumns,
    learned: LearnedColumns,
    params: PredictorParams,
) -> Prediction:
    rtt, rtt_age, rtt_sd = _rtt(view, rows, now, params)
    queue, queue_age, queue_sd, depth = _queue(view, rows, now, load, learned, params)
    uncached = np.maximum(profile.prompt_tokens - cached_tokens, 0.0)
    prefill = 1000.0 * uncached / learned.prefill_rate[rows]
    prefill_sd = np.where(learned.prefill_samples[rows] >= 10, 0.1, 0.25) * prefill
    cold, cold_sd = _cold(view, rows, now, load, learned, params)
    bias, bias_sd = learned.bias_ms[rows], learned.bias_dev_ms[rows]
    overhead = view.overhead_ms[rows]
    overhead_sd = 0.2 * overhead
    ttft = np.maximum(rtt + queue + prefill + cold + bias + overhead, 0.0)
    spreads = (rtt_sd, queue_sd, prefill_sd, cold_sd, bias_sd, overhead_sd)
    sd = np.sqrt(sum(x * x for x in spreads))
    p90 = np.maximum(ttft + Z90 * sd, ttft * learned.ratio_p90[rows])
    e2e = None
    if profile.latency_class is LatencyClass.LONG_FORM:
        e2e = _end_to_end(view, rows, profile, ttft, depth, learned, params)
    return Prediction(
        terms_ms=dict(zip(TERMS, (rtt, queue, prefill, cold, bias, overhead), strict=True)),
        age_s=_ages(view, rows, now, learned, rtt_age, queue_age),
        spread_ms=dict(zip(TERMS, spreads, strict=True)),
        ttft_ms=ttft,
        ttft_p90_ms=p90,
        e2e_ms=e2e,
        cached_tokens=cached_tokens,
        score=ttft if e2e is None else e2e,
    )
