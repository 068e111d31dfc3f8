"""Online, per-backend corrections to the TTFT model, learned from observed requests.

Each observation carries the terms the router predicted. The term that dominated the
prediction is the one the error is blamed on (queue, prefill or cold start), so one number
(TTFT) can teach several estimators without them fighting; when no variable term dominates,
the error is a fixed offset and feeds ``bias``, as does a prefill far later than any plausible
rate change (an RTT jump on a backend without probes would otherwise slash its prefill rate).
Rates and scales move multiplicatively by a clipped step (``max_log_step``) so one outlier (a
GC pause, a retry) cannot swing the model, and they settle on the median of their samples.

Every estimate stays within physical reach of configuration: the prefill rate and the queue
scale within ``max_ratio`` either way of the configured value (they multiply themselves, so
without a bound a run of skewed samples compounds without limit), the bias between minus the
offsets it corrects and ``max_bias_ms``. A sample whose sign makes no sense (a prefill or a
queue that took negative time) teaches nothing. A serverless request is judged warm or cold
from the backend's own word (``Observation.cold_start``) or, failing that, from whether it
took a cold start longer than predicted without one; a wrong guess about the cold start is
then taken out of the residual instead of being learned as bias.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from routing.types import BackendSpec, Observation

_P90_TAU = 0.9
_OFFSETS = ("rtt", "first_token_overhead")  # terms a negative bias may cancel
_VARIABLE = ("queue", "prefill", "step", "cold_start")  # terms with an estimator of their own


@dataclass(frozen=True, slots=True)
class LearnerParams:
    alpha: float = 0.1  # EWMA weight of one sample for rates and scales
    bias_alpha: float = 0.05
    quantile_step: float = 0.05  # step of the online p90 tracker of actual/predicted
    min_term_ms: float = 2.0  # a term smaller than this carries no signal about its rate
    dominant_share: float = 0.6  # share of (queue+prefill+cold) a term needs to take the blame
    max_ratio: float = 4.0  # estimates stay within [1/r, r] x the configured value
    # One sample moves a rate or scale by at most alpha x this, in log terms: residuals are
    # skewed (a request can land behind a long step, never before the one in progress), and a
    # clipped update tracks their median, which is what a point prediction should hit.
    max_log_step: float = 0.5
    max_bias_ms: float = 1000.0  # beyond this an offset is an outage, not a correction
    # A dominant prefill that took this many times longer than predicted is not a slower GPU
    # but an offset that moved (an RTT jump, a stalled hop): blamed on bias, not on the rate.
    offset_ratio: float = 4.0
    # Weight of the estimate pooled over identically configured backends of a region. Each
    # backend's own estimate is a noisy walk (ten-odd effective samples); between identical
    # GPUs that noise alone makes some look faster for minutes and draws load to them.
    peer_weight: float = 0.0


class BackendEstimate:
    """Mutable learned state for one backend; ``None`` means "use the configured value"."""

    __slots__ = (
        "abs_rel_error",
        "bias_dev_ms",
        "bias_ms",
        "cold_start_ms",
        "failures",
        "itl_ms",
        "last_at",
        "observations",
        "prefill_ms",
        "prefill_rate",
        "prefill_samples",
        "queue_scale",
        "ratio_p90",
        "service_ms",
        "step_scale",
    )

    def __init__(self) -> None:
        self.observations = 0
        self.failures = 0
        self.last_at: float | None = None
        self.prefill_rate: float | None = None
        self.prefill_samples = 0
        self.queue_scale = 1.0
        self.step_scale = 1.0  # engine step (decode beside a prefill) over its model
        self.bias_ms = 0.0
        self.bias_dev_ms = 0.0

        self.itl_ms: float | None = None
        self.cold_start_ms: float | None = None
        self.service_ms: float | None = None  # how long a request occupies a batch slot
        self.prefill_ms: float | None = None  # prefill time of a typical request here
        self.ratio_p90 = 1.0  # online p90 of actual / predicted TTFT
        self.abs_rel_error: float | None = None  # EWMA of |actual / predicted - 1|


def peer_key(spec: BackendSpec) -> tuple[object, ...]:
    """Backends with equal keys are configured alike in one region: they pool corrections."""
    return (
        spec.region, spec.kind, spec.prefill_tokens_per_s, spec.itl_ms, spec.max_num_seqs,
        spec.max_num_batched_tokens, spec.first_token_overhead_ms,
    )  # fmt: skip


def _ewma(current: float | None, sample: float, alpha: float) -> float:
    return sample if current is None else current + alpha * (sample - current)


def _cold_start_of(obs: Observation, predicted_cold: float, spec: BackendSpec | None) -> bool:
    """Did this request pay a cold start? The backend's word if given; else whether the
    residual left after the warm terms holds at least half a cold start."""
    if obs.cold_start is not None:
        return obs.cold_start
    full = spec.cold_start_ms if spec is not None else 0.0
    if full <= 0.0:
        full = predicted_cold
    if full <= 0.0:
        return False
    assert obs.ttft_ms is not None
    warm = sum(obs.predicted_terms_ms.values()) - predicted_cold
    return obs.ttft_ms - warm > 0.5 * full


class OnlineLearner:
    def __init__(self, params: LearnerParams | None = None) -> None:
        self.params = params or LearnerParams()
        self._estimates: dict[str, BackendEstimate] = {}
        self._peers: dict[tuple[object, ...], BackendEstimate] = {}
        self._members: dict[tuple[object, ...], set[str]] = {}
        self.dirty: set[str] = set()  # backends changed since the predictor last looked
        self.dirty_peers: set[tuple[object, ...]] = set()  # ...and groups of backends (peer_key)

    def estimate(self, backend: str) -> BackendEstimate | None:
        return self._estimates.get(backend)

    def estimates(self) -> Mapping[str, BackendEstimate]:
        return self._estimates

    def observe(self, obs: Observation, spec: BackendSpec | None, itl_scale: float = 1.0) -> None:
        """Learn from ``obs``. ``itl_scale``: the ITL at the batch the request ran in over the
        ITL at a half-full batch (what ``itl_ms`` estimates), as the caller's model says."""
        est = self._estimates.get(obs.backend)
        if est is None:
            est = self._estimates[obs.backend] = BackendEstimate()
        est.observations += 1
        est.last_at = obs.at
        self.dirty.add(obs.backend)
        if not obs.ok:
            est.failures += 1
            return
        alpha = self.params.alpha
        if obs.itl_ms is not None and obs.itl_ms > 0:
            est.itl_ms = _ewma(est.itl_ms, obs.itl_ms / itl_scale, alpha)
        if obs.ttft_ms is None or obs.ttft_ms < 0:
            return
        if obs.itl_ms is not None and obs.output_tokens > 0:
            est.service_ms = _ewma(
                est.service_ms, obs.ttft_ms + obs.itl_ms * obs.output_tokens, alpha
            )
        if not obs.first_token_observed:
            self._learn_ttft(est, obs, spec)

    def observe_first_token(self, obs: Observation, spec: BackendSpec | None) -> None:
        """Learn the TTFT terms from ``obs`` as soon as its first token is seen, long before the
        stream ends (a backlog the scrape hides shows only in TTFT, and a long stream would
        tell it seconds late). The request is counted, and ITL learned, by ``observe`` later."""
        if obs.ttft_ms is None or obs.ttft_ms < 0:
            return
        est = self._estimates.get(obs.backend)
        if est is None:
            est = self._estimates[obs.backend] = BackendEstimate()
        est.last_at = obs.at
        self.dirty.add(obs.backend)
        self._learn_ttft(est, obs, spec)

    def _learn_ttft(self, est: BackendEstimate, obs: Observation, spec: BackendSpec | None) -> None:
        assert obs.ttft_ms is not None
        terms = obs.predicted_terms_ms
        predicted = obs.predicted_ttft_ms
        if predicted is None and terms:
            predicted = sum(terms.values())
        if predicted is not None and predicted > 0:
            self._calibrate(est, obs.ttft_ms / predicted)
        if terms:
            self._blame(est, obs, terms, spec)
            if spec is not None and self.params.peer_weight > 0.0:
                self._learn_peer(obs, terms, spec)

    def peer(self, spec: BackendSpec) -> BackendEstimate | None:
        """What backends configured like ``spec`` (same region) taught together, if any."""
        return self._peers.get(peer_key(spec)) if self._peers else None

    def _learn_peer(self, obs: Observation, terms: Mapping[str, float], spec: BackendSpec) -> None:
        key = peer_key(spec)
        peer = self._peers.get(key)
        if peer is None:
            peer = self._peers[key] = BackendEstimate()
            self._members[key] = set()
        members = self._members[key]
        members.add(obs.backend)
        self._blame(peer, obs, terms, spec)
        peer.observations += 1
        # Every backend of the group (observed or not) follows the pooled estimate in batches:
        # one observation costs O(1) column rows amortised however large the group (the
        # observed backend is refreshed anyway).
        if peer.observations % max(1, len(members) // 4) == 0:
            self.dirty_peers.add(key)

    def _calibrate(self, est: BackendEstimate, ratio: float) -> None:
        step = self.params.quantile_step
        est.ratio_p90 += step * (_P90_TAU if ratio > est.ratio_p90 else _P90_TAU - 1.0)
        est.ratio_p90 = max(est.ratio_p90, 0.5)
        est.abs_rel_error = _ewma(est.abs_rel_error, abs(ratio - 1.0), self.params.alpha)

    def _blame(
        self,
        est: BackendEstimate,
        obs: Observation,
        terms: Mapping[str, float],
        spec: BackendSpec | None,
    ) -> None:
        assert obs.ttft_ms is not None
        queue, prefill, step, cold = (terms.get(k, 0.0) for k in _VARIABLE)
        if prefill > 0:
            est.prefill_ms = _ewma(est.prefill_ms, prefill, self.params.alpha)
        fixed = sum(terms.values()) - queue - prefill - step - cold
        variable = obs.ttft_ms - fixed  # what queue + prefill + step + cold start really took
        if _cold_start_of(obs, cold, spec):
            if obs.cold_start:  # only the backend's word measures a whole cold start
                sample = max(0.0, variable - queue - prefill - step)
                est.cold_start_ms = _ewma(est.cold_start_ms, sample, 0.3)
            return  # a cold start's noise swamps whatever the warm terms got wrong
        # Evidently warm: a predicted cold start was a miss, not an offset; ``variable`` is
        # what queue + prefill + step took.
        if obs.queue_wait_ms is not None:
            self._learn_queue(est, queue, obs.queue_wait_ms)
            self._learn_prefill(est, prefill, variable - obs.queue_wait_ms - step, spec)
            return
        p = self.params
        share = p.dominant_share * (queue + prefill + step)
        if prefill >= p.min_term_ms and prefill >= share:
            prefill_took = variable - queue - step
            if prefill_took <= p.offset_ratio * prefill:
                self._learn_prefill(est, prefill, prefill_took, spec)
                return
        elif queue >= p.min_term_ms and queue >= share:
            self._learn_queue(est, queue, variable - prefill - step)
            return
        elif step >= p.min_term_ms and step >= share:
            est.step_scale = self._rescaled(est.step_scale, step, variable - queue - prefill)
            return
        # No variable term dominates, or the prefill took implausibly long: an offset (RTT,
        # overhead) was wrong.
        self._learn_bias(est, variable - queue - prefill - step, terms)

    def _learn_prefill(
        self, est: BackendEstimate, predicted_ms: float, actual_ms: float, spec: BackendSpec | None
    ) -> None:
        if predicted_ms < self.params.min_term_ms or actual_ms <= 0.0 or spec is None:
            return
        configured = spec.prefill_tokens_per_s
        rate = est.prefill_rate or configured
        est.prefill_rate = configured * self._rescaled(rate / configured, actual_ms, predicted_ms)
        est.prefill_samples += 1

    def _learn_queue(self, est: BackendEstimate, predicted_ms: float, actual_ms: float) -> None:
        est.queue_scale = self._rescaled(est.queue_scale, predicted_ms, actual_ms)

    def _rescaled(self, scale: float, predicted_ms: float, actual_ms: float) -> float:
        """A learned scale (1 = as configured or modelled) after one sample of its term."""
        if predicted_ms < self.params.min_term_ms or actual_ms <= 0.0:
            return scale
        p = self.params
        step = min(max(math.log(actual_ms / predicted_ms), -p.max_log_step), p.max_log_step)
        learned = scale * math.exp(p.alpha * step)
        return min(max(learned, 1.0 / p.max_ratio), p.max_ratio)

    def _learn_bias(
        self, est: BackendEstimate, residual_ms: float, terms: Mapping[str, float]
    ) -> None:
        """``residual_ms``: actual minus the prediction without its cold-start term."""
        alpha = self.params.bias_alpha
        # A negative bias can cancel at most the offsets it corrects (RTT, fixed overheads).
        floor = -sum(terms.get(k, 0.0) for k in _OFFSETS)
        learned = _ewma(est.bias_ms, est.bias_ms + residual_ms, alpha)
        est.bias_ms = min(max(learned, floor), self.params.max_bias_ms)
        est.bias_dev_ms = _ewma(
            est.bias_dev_ms, min(abs(residual_ms), self.params.max_bias_ms), alpha
        )
