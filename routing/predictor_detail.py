"""The breakdown of one backend's prediction: each term's signal age and spread, and the p90.

Spreads are 1-sigma per term and grow with the age of the term's signal (a signal
``stale_after_s`` old has its spread doubled); the p90 combines them as independent terms and
never falls below the backend's learned p90 of actual/predicted. Ranking does not need any of
this, so it is worked out only for the candidates a decision returns, from ``RowInputs``
captured when the decision was taken.
"""

from __future__ import annotations

import math
from typing import NamedTuple

TERMS = (
    "rtt", "queue", "prefill", "step", "cold_start", "downstream", "bias",
    "first_token_overhead",
)  # fmt: skip
CONFIGURED = -1.0  # signal age of a term that comes from configuration, not observation
Z90 = 1.2815515655446004


class RowInputs(NamedTuple):
    terms: tuple[float, ...]  # in TERMS order
    ttft_ms: float
    rtt_age_s: float | None  # None: not measured (region table or configured fallback)
    rtt_unknown: bool  # ...and not in the region table either
    metrics_age_s: float | None  # None: the engine reports no queue metrics
    learned_age_s: float
    traffic_age_s: float
    cold_prob: float
    cold_start_ms: float
    downstream_age_s: float | None  # None: no downstream report for this model
    prefill_samples: float
    bias_dev_ms: float
    ratio_p90: float
    stale_after_s: float
    placement_ms: float  # the request's placement penalty (score only, not TTFT)
    evidence_horizon_s: float = 10.0  # see PredictorParams


class Breakdown(NamedTuple):
    age_s: tuple[float, ...]  # in TERMS order
    spread_ms: tuple[float, ...]
    ttft_p90_ms: float


def _staleness(age: float, stale_after_s: float) -> float:
    return 1.0 + max(age, 0.0) / stale_after_s


def breakdown(x: RowInputs) -> Breakdown:
    rtt, queue, prefill, step, cold, downstream, bias, overhead = x.terms
    stale = x.stale_after_s
    if x.rtt_age_s is not None:
        rtt_age, rtt_rel = x.rtt_age_s, 0.1 * _staleness(x.rtt_age_s, stale)
    else:
        rtt_age, rtt_rel = CONFIGURED, 0.5 if x.rtt_unknown else 0.25
    queue_age, queue_rel = 0.0, 0.5
    if x.metrics_age_s is not None:
        queue_age, queue_rel = x.metrics_age_s, 0.2 * _staleness(x.metrics_age_s, stale)
    prob = x.cold_prob
    cold_sd = x.cold_start_ms * math.sqrt(prob * (1.0 - prob)) + 0.2 * cold
    down_age, down_sd = CONFIGURED, 0.0
    if x.downstream_age_s is not None:
        down_age = x.downstream_age_s
        down_sd = 0.2 * _staleness(down_age, stale) * downstream
    prefill_rel = 0.1 if x.prefill_samples >= 10 else 0.25
    learned_age = x.learned_age_s
    # The step in progress is anywhere from just begun to nearly done: uniform, sd ~ 0.29.
    step_sd = 0.3 * step
    ages = (
        rtt_age, queue_age, learned_age, queue_age, x.traffic_age_s,
        down_age, learned_age, CONFIGURED,
    )  # fmt: skip
    # A learned offset is doubted more the older its evidence (all of it at the horizon):
    # what the backend did a minute ago is not what it does now.
    doubt = min(max(learned_age, 0.0) / x.evidence_horizon_s, 1.0) * abs(bias)
    spreads = (
        rtt_rel * rtt, queue_rel * queue, prefill_rel * prefill, step_sd,
        cold_sd, down_sd, x.bias_dev_ms + doubt, 0.2 * overhead,
    )  # fmt: skip
    sd = math.sqrt(sum([s * s for s in spreads]))  # a list: one call, not a resumption each
    ttft = x.ttft_ms
    return Breakdown(ages, spreads, max(ttft + Z90 * sd, ttft * x.ratio_p90))
