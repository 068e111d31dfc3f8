"""Online, per-backend corrections to the TTFT model, learned from observed requests.

Each observation carries the terms the router predicted. The residual is blamed on what could
have changed: the term that dominated the prediction (queue, prefill, step or cold start) takes
it as a change of its rate only when the time it implies is physically plausible for that term
(positive, at most ``offset_ratio`` x predicted); otherwise, or when no variable term
dominates, a fixed offset moved (an RTT jump, a stalled hop) and the offset learns it
(``routing.offset_learning``: slow calibration plus detected level shifts, both directions
alike; a surprising residual is weighed as a step of the offset before any rate sees it).
Except on a request that queued: when no term dominates but a queue was predicted and can have
caused the residual, the queue scale takes it (``_queue_explains``). Load-dependent errors (our
own reservations ahead that really shared a step, a scraped queue long drained) are the queue
model's, and blamed on the offset they drove it to its floor while the rates drifted the other
way to compensate (issue 14, scenario 3). Ranking still counts our own reservations in full
(``RowTerms.hedge``): the learned scale corrects the predicted TTFT, not the spreading.
The engine step and the offset are near-collinear (a backend's step hardly varies), so when
the step scale and the offset lean opposite ways a share of the step's deviation moves into
the offset, prediction unchanged (``offset_learning.settle_step``); else the two walk apart.
Measured: ``python -m loadtests.bench_calibration`` (docs/results/calibration.md). Rates and
scales move by clipped multiplicative steps (``routing.rate_learning``), the queue scale
against the scale of the sample's own decision (an overload answers 20 s late). A slot's
service time is what a request spent in the batch, not its wait for a slot
(``learner_samples.in_batch_ms``). Every correction decays toward configuration when no sample refreshes it
(``routing.learning_decay``), so one bad minute is not a permanent exile.

Every estimate stays within physical reach of configuration: the prefill rate and the queue
scale within ``max_ratio`` either way of the configured value, the offset between minus the
offsets it corrects and ``max_bias_ms``. A sample whose sign makes no sense (a prefill or a
queue that took negative time) teaches no rate. A serverless request is judged warm or cold
from the backend's own word (``Observation.cold_start``) or, failing that, from whether it
took a cold start longer than predicted without one; a wrong guess about the cold start is
then taken out of the residual instead of being learned as bias.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from routing.learner_samples import cold_start_of, in_batch_ms, ttft_of
from routing.learner_state import BackendEstimate as BackendEstimate
from routing.learner_state import LearnerParams as LearnerParams
from routing.learner_state import peer_key as peer_key
from routing.learning_decay import DecayParams, decay, sweep
from routing.offset_learning import (
    OffsetParams,
    Verdict,
    consider_shift,
    learn_bias,
    settle_step,
    surprise_ms,
)
from routing.rate_learning import learn_prefill, learn_queue, rescaled
from routing.types import BackendSpec, Observation

_P90_TAU = 0.9
_OFFSETS = ("rtt", "first_token_overhead")  # terms a negative bias may cancel
_VARIABLE = ("queue", "prefill", "step", "cold_start")  # terms with an estimator of their own


def _ewma(current: float | None, sample: float, alpha: float) -> float:
    return sample if current is None else current + alpha * (sample - current)


class OnlineLearner:
    def __init__(self, params: LearnerParams | None = None) -> None:
        self.params = params or LearnerParams()
        self._estimates: dict[str, BackendEstimate] = {}
        self._peers: dict[tuple[object, ...], BackendEstimate] = {}
        self._members: dict[tuple[object, ...], set[str]] = {}
        self.dirty: set[str] = set()  # backends changed since the predictor last looked
        self.dirty_peers: set[tuple[object, ...]] = set()  # ...and groups of backends (peer_key)
        self.shifted: set[str] = set()  # backends whose offset holds a step (reconcile_rtt)
        self._stepped_now = False  # the sample being learned was (part of) a step
        self._bound_ms = 0.0  # the surprise threshold of the sample being learned
        p = self.params
        self._offset_params = OffsetParams(
            p.bias_alpha, p.max_bias_ms, p.surprise_sigmas, p.shift_min_ms, p.shift_rel,
            p.stale_evidence_s, p.shift_confirm, p.shift_spread,
            p.pending_clip,
        )  # fmt: skip
        self._decay_params = DecayParams(p.half_life_s, p.decay_grace_s, p.decay_tick_s)
        self._swept_at = -math.inf

    def reconcile_rtt(self, backend: str, rtt_ms: float) -> None:
        """The probes now measure ``rtt_ms`` for ``backend``. If they rose since its learned
        step was measured, they see (part of) what the step was learned for: that part
        leaves the step, or it would be counted twice (requests that paid a slow path before
        the probe, which itself pays it, could report)."""
        est = self._estimates.get(backend)
        if est is None or est.shift_ms <= 0.0 or est.shift_rtt_ms is None:
            self.shifted.discard(backend)
            return
        rise = rtt_ms - est.shift_rtt_ms
        if rise >= self.params.shift_min_ms:  # NaN (no RTT known) compares False
            est.shift_ms -= min(rise, est.shift_ms)
            est.shift_rtt_ms = rtt_ms
            self.dirty.add(backend)

    def decay(self, now: float) -> None:
        """Let estimates nobody refreshed drift back toward configuration (at most once per
        ``decay_tick_s`` of router time); the ones that moved are marked dirty."""
        dp = self._decay_params
        if now - self._swept_at < dp.tick_s:
            return
        self._swept_at = now
        self.dirty.update(sweep(self._estimates.items(), now, dp))  # type: ignore[arg-type]
        self.dirty_peers.update(sweep(self._peers.items(), now, dp))  # type: ignore[arg-type]

    def estimate(self, backend: str) -> BackendEstimate | None:
        return self._estimates.get(backend)

    def estimates(self) -> Mapping[str, BackendEstimate]:
        return self._estimates

    def observe(
        self,
        obs: Observation,
        spec: BackendSpec | None,
        itl_scale: float = 1.0,
        queued: bool = False,
    ) -> None:
        """Learn from ``obs``. ``itl_scale``: the ITL at the batch the request ran in over the
        ITL at a half-full batch (what ``itl_ms`` estimates), as the caller's model says.
        ``queued``: the engine has a queue now (``observe_first_token``)."""
        est = self._estimates.get(obs.backend)
        if est is None:
            est = self._estimates[obs.backend] = BackendEstimate()
        decay(est, obs.at, self._decay_params)
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
            held_ms = in_batch_ms(obs) + obs.itl_ms * obs.output_tokens
            est.service_ms = _ewma(est.service_ms, held_ms, alpha)
        if not obs.first_token_observed:
            self._learn_ttft(est, obs, spec, queued)

    def observe_first_token(
        self, obs: Observation, spec: BackendSpec | None, queued: bool = False
    ) -> None:
        """Learn the TTFT terms from ``obs`` as soon as its first token is seen, long before the
        stream ends (a backlog the scrape hides shows only in TTFT, and a long stream would
        tell it seconds late). The request is counted, and ITL learned, by ``observe`` later.

        ``queued``: the engine has a queue now (requests waiting, or a full batch). Its
        surprises are then not weighed as steps of the offset: a queue's wait is the same
        for every request size, as a path's extra is, and scenario 1's spike confirmed ~25
        such "steps" of 130-1000 ms on the eu-west backends, each sending traffic away for a
        half-life. They are learned as any unsurprising residual is (queue, rates, the slow
        part of the offset), and steps are weighed again once the queue has drained."""
        if obs.ttft_ms is None or obs.ttft_ms < 0:
            return
        est = self._estimates.get(obs.backend)
        if est is None:
            est = self._estimates[obs.backend] = BackendEstimate()
        decay(est, obs.at, self._decay_params)
        est.last_at = obs.at
        self.dirty.add(obs.backend)
        self._learn_ttft(est, obs, spec, queued)

    def _learn_ttft(
        self, est: BackendEstimate, obs: Observation, spec: BackendSpec | None, queued: bool
    ) -> None:
        terms = obs.predicted_terms_ms
        predicted = obs.predicted_ttft_ms
        if predicted is None and terms:
            predicted = sum(terms.values())
        if predicted is not None and predicted > 0:
            self._calibrate(est, ttft_of(obs) / predicted)
        if terms:
            shift, held = est.shift_ms, est.shift_held_ms
            self._stepped_now = False
            self._blame(est, obs, terms, spec, own=True, queued=queued)
            est.offset_at = obs.at
            if est.shift_ms > shift:
                est.shift_rtt_ms = terms.get("rtt")
                self.shifted.add(obs.backend)
            # An outage (the offset at ``max_bias_ms``: what no correction covers, a path
            # black-holed for seconds) is this backend's own: taught to its group, scenario
            # 10's 20 s answers put ~1.7 s on every backend of the region, and traffic left
            # the healthy one too, for good. (A residual a rate took, a queue 3x slower, is
            # still the group's: only the capped offset says outage.)
            outage = est.offset_ms >= 0.999 * self.params.max_bias_ms
            if spec is not None and self.params.peer_weight > 0.0 and not outage:
                self._share(obs, terms, spec, est, held)

    def _share(
        self,
        obs: Observation,
        terms: Mapping[str, float],
        spec: BackendSpec,
        est: BackendEstimate,
        held: float,
    ) -> None:
        """Teach the group what this sample taught the backend's slow part. A candidate step
        teaches it as it teaches the backend's own (with ``pending_clip``, at most the surprise
        threshold: unclipped, every member's transient spikes feed one EWMA, and scenario 2's
        pooled offset stood 45 ms high in its first 30 s); a confirmed step is the backend's
        own: the group does not learn it, and gives back what the candidates taught it."""
        pending = bool(est.shift_window)
        if not self._stepped_now:
            self._learn_peer(obs, terms, spec)
            return
        if pending:
            self._learn_peer(obs, terms, spec, self._offset_params.pending_clip * self._bound_ms)
            return
        peer = self._peers.get(peer_key(spec))
        if peer is not None and held:
            peer.bias_ms -= held
            self.dirty_peers.add(peer_key(spec))

    def peer(self, spec: BackendSpec) -> BackendEstimate | None:
        """What backends configured like ``spec`` (same region) taught together, if any."""
        return self._peers.get(peer_key(spec)) if self._peers else None

    def _learn_peer(
        self,
        obs: Observation,
        terms: Mapping[str, float],
        spec: BackendSpec,
        clip_ms: float = math.inf,
    ) -> None:
        key = peer_key(spec)
        peer = self._peers.get(key)
        if peer is None:
            peer = self._peers[key] = BackendEstimate()
            self._members[key] = set()
        members = self._members[key]
        members.add(obs.backend)
        decay(peer, obs.at, self._decay_params)
        self._blame(peer, obs, terms, spec, own=False, clip_ms=clip_ms)
        peer.observations += 1
        peer.last_at = obs.at
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
        own: bool,
        clip_ms: float = math.inf,
        queued: bool = False,
    ) -> None:
        """Blame the residual on what could have changed. A surprising residual is first
        weighed as a step of the offset (``consider_shift``: alike across request sizes, as an
        RTT jump is, or a learned step going back; else a recovered backend's negative
        residual lands on a rate, which cannot take it, and the offset stays for ever). Then a
        term takes it as a rate only when the time it implies is physically plausible for
        that term (positive, at most ``offset_ratio`` x predicted); anything else is an
        offset (an RTT change, a stalled hop), whichever term dominated."""
        queue, prefill, step, cold = (terms.get(k, 0.0) for k in _VARIABLE)
        if prefill > 0:
            est.prefill_ms = _ewma(est.prefill_ms, prefill, self.params.alpha)
        fixed = sum(terms.values()) - queue - prefill - step - cold
        variable = ttft_of(obs) - fixed  # what queue + prefill + step + cold start really took
        if cold_start_of(obs, cold, spec):
            if obs.cold_start:  # only the backend's word measures a whole cold start
                sample = max(0.0, variable - queue - prefill - step)
                est.cold_start_ms = _ewma(est.cold_start_ms, sample, 0.3)
            return  # a cold start's noise swamps whatever the warm terms got wrong
        # Evidently warm: a predicted cold start was a miss, not an offset; ``variable`` is
        # what queue + prefill + step took.
        residual = variable - queue - prefill - step
        warm = fixed + queue + prefill + step
        settle_step(est, step, self.params.step_pull, self.params.min_term_ms)
        if own and not queued and self._stepped(est, obs, residual, warm, terms):
            self._stepped_now = True
            return  # a step of the offset (or a candidate one): no rate's to learn
        p = self.params
        if obs.queue_wait_ms is not None:
            learn_queue(est, queue, obs.queue_wait_ms, obs, p)
            took = variable - obs.queue_wait_ms - step
            if prefill >= p.min_term_ms and not self._plausible(prefill, took):
                self._learn_offset(est, took - prefill, terms, clip_ms)
            else:
                learn_prefill(est, prefill, took, spec, p)
            return
        share = max(p.dominant_share * (queue + prefill + step), p.min_term_share * warm)
        dominant = next(
            (name for name, ms in (("prefill", prefill), ("queue", queue), ("step", step))
             if ms >= p.min_term_ms and ms >= share),
            None,
        )  # fmt: skip
        if dominant is not None:
            term = terms[dominant]
            took = term + residual  # what the dominant term really took
            if self._plausible(term, took):
                if dominant == "prefill":
                    learn_prefill(est, prefill, took, spec, p)
                elif dominant == "queue":
                    learn_queue(est, queue, took, obs, p)
                else:
                    est.step_scale = rescaled(est.step_scale, step, took, p)
                return
        if self._queue_explains(est, queue, residual, obs):
            return
        # No variable term dominates, or the one that does would have taken an implausible
        # time, and no queue can explain it: an offset (RTT, overhead, a hop) was wrong.
        self._learn_offset(est, residual, terms, clip_ms)

    def _queue_explains(
        self, est: BackendEstimate, queue_ms: float, residual_ms: float, obs: Observation
    ) -> bool:
        """A residual on a request that queued (behind the engine's queue or our own
        reservations ahead) is the queue's to learn when the queue can have caused it: what
        the queue took (``queue_ms + residual_ms``) is at most ``offset_ratio`` x predicted,
        and not so far below zero that more than the queue was wrong. Load-dependent errors
        then stay off the offset: blamed on it, they drive it to its floor while the rates
        drift the other way to compensate, in an equilibrium where every term is wrong (issue
        14: scenario 3's bias at -11 ms, prefill 20-25% slow). A queue that took no time at
        all is learned as taking the least a scale can express."""
        p = self.params
        took = queue_ms + residual_ms
        if queue_ms < p.min_term_ms or not -queue_ms <= took <= p.offset_ratio * queue_ms:
            return False
        learn_queue(est, queue_ms, max(took, queue_ms / p.offset_ratio), obs, p)
        return True

    def _stepped(
        self,
        est: BackendEstimate,
        obs: Observation,
        residual_ms: float,
        warm_ms: float,
        terms: Mapping[str, float],
    ) -> bool:
        """Whether ``consider_shift`` takes the residual as a step of the offset (or holds it
        as a candidate). With the backend's word on its queue wait, only what the queue does
        not explain is weighed, against the prefill."""
        queue, prefill, step = (terms.get(k, 0.0) for k in _VARIABLE[:3])
        rate = est.prefill_rate
        # Each term with the learned scale that produced it (its value at the configured rate
        # is the term over the scale).
        prefill_scale = (
            1.0 if rate is None or not est.configured_rate else est.configured_rate / rate
        )
        candidates = [(prefill, prefill_scale)]
        if obs.queue_wait_ms is not None:
            residual_ms -= obs.queue_wait_ms - queue
        else:
            candidates += [(queue, est.queue_scale), (step, est.step_scale)]
        term, scale = max(candidates)
        # A residual against a learned step is that step going back before it is any rate's.
        back = residual_ms < 0.0 < est.shift_ms
        plausible = (
            not back
            and term >= self.params.min_term_ms
            and self._plausible(term, term + residual_ms)
        )
        implied = (term + residual_ms) * scale / term if plausible else 0.0
        floor = -sum(terms.get(k, 0.0) for k in _OFFSETS)
        self._bound_ms = surprise_ms(est, warm_ms, self._offset_params)
        verdict = consider_shift(
            est, residual_ms, implied, plausible, warm_ms, floor, obs.at, self._offset_params
        )
        return verdict is not Verdict.NOT_A_SHIFT

    def _plausible(self, predicted_ms: float, took_ms: float) -> bool:
        """Whether a term predicted at ``predicted_ms`` can have taken ``took_ms`` by a change
        of its rate (a slower GPU, a slower-draining queue) rather than by an offset."""
        return 0.0 < took_ms <= self.params.offset_ratio * predicted_ms

    def _learn_offset(
        self,
        est: BackendEstimate,
        residual_ms: float,
        terms: Mapping[str, float],
        clip_ms: float = math.inf,
    ) -> None:
        """``residual_ms``: actual minus the warm prediction, blamed on a fixed offset, at most
        ``clip_ms`` either way (a member's candidate step teaches its peers as little as it
        teaches the member's own slow part)."""
        # A negative offset can cancel at most the offsets it corrects (RTT, fixed overheads).
        floor = -sum(terms.get(k, 0.0) for k in _OFFSETS)
        residual_ms = min(max(residual_ms, -clip_ms), clip_ms)
        learn_bias(est, residual_ms, floor, self._offset_params)
