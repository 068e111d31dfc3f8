"""Learning a rate or a scale of the TTFT model from one sample of its term (``routing.learner``
decides which term a residual belongs to; this moves it).

Rates and scales move multiplicatively by a clipped step (``max_log_step``), so one outlier (a
GC pause, a retry) cannot swing the model and they settle on the median of their samples, and
they stay within ``max_ratio`` either way of configuration (they multiply themselves: without
a bound a run of skewed samples compounds without limit). The queue scale is judged against
the scale of the sample's own decision (``routing.scale_log``): in an overload the answer comes
back 20 s after the prediction it grades.
"""

from __future__ import annotations

import math

from routing.learner_samples import decided_at
from routing.learner_state import BackendEstimate, LearnerParams
from routing.types import BackendSpec, Observation


def rescaled(
    scale: float,
    predicted_ms: float,
    actual_ms: float,
    p: LearnerParams,
    then: float | None = None,
) -> float:
    """A learned scale (1 = as configured or modelled) after one sample of its term, whose
    prediction was made with the scale at ``then`` (default: ``scale``, as now)."""
    if predicted_ms < p.min_term_ms or actual_ms <= 0.0:
        return scale
    step = min(max(math.log(actual_ms / predicted_ms), -p.max_log_step), p.max_log_step)
    if then is not None:  # toward what the decision's scale should have been
        step += math.log(then / scale)
    learned = scale * math.exp(p.alpha * step)
    return min(max(learned, 1.0 / p.max_ratio), p.max_ratio)


def learn_prefill(
    est: BackendEstimate,
    predicted_ms: float,
    actual_ms: float,
    spec: BackendSpec | None,
    p: LearnerParams,
) -> None:
    if predicted_ms < p.min_term_ms or actual_ms <= 0.0 or spec is None:
        return
    configured = est.configured_rate = spec.prefill_tokens_per_s
    rate = est.prefill_rate or configured
    # A rate is the inverse of a time: the sample's ratio, upside down.
    est.prefill_rate = configured * rescaled(rate / configured, actual_ms, predicted_ms, p)
    est.prefill_samples += 1


def learn_queue(
    est: BackendEstimate,
    predicted_ms: float,
    actual_ms: float,
    obs: Observation,
    p: LearnerParams,
) -> None:
    """Against the scale of the sample's decision: an answer that waited 20 s says what the
    scale should have been 20 s ago."""
    before = est.queue_scale
    then = est.queue_log.at(decided_at(obs), before)
    est.queue_scale = rescaled(before, predicted_ms, actual_ms, p, then)
    if est.queue_scale != before:
        est.queue_log.record(obs.at, before, est.queue_scale)
