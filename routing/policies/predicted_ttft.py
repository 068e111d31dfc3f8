"""Meridian's policy: the lowest predicted TTFT (or end-to-end time for long-form requests).

Prefix affinity is not a rule here but a term: cached tokens shorten the prefill term, so a
warm but overloaded backend can lose to a cold idle one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from routing.awaiting import AwaitingFirstToken, OverdueParams
from routing.exploration import Exploration, ExploreParams, Explorer
from routing.fleet_view import F64, FleetView, eligible_positions
from routing.keep_warm import keep_warm_positions, keep_warm_rows
from routing.learned_columns import LearnedColumns, LearnedFrame
from routing.learner import LearnerParams, OnlineLearner
from routing.load import LoadColumns
from routing.peer_learning import reexpressed
from routing.pipeline.filters import default_filters
from routing.pipeline.pickers import MarginPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scores
from routing.policies.fused_ttft import FusedTTFTRouter
from routing.policies.predicted_ttft_params import PredictedTTFTParams
from routing.policies.scalar_ttft import RowScores
from routing.predictor import TERMS, PredictorParams, RowInputs, predict, row_inputs
from routing.predictor_rows import RowTerms
from routing.predictor_scalar import RowPrediction, predict_rows
from routing.prefix_index import PrefixIndex, PurgeProgress, matching_chain
from routing.prewarm import PrewarmParams, warm_up_rows
from routing.step_clock import StepClock, phased
from routing.types import FirstToken, LatencyClass, Observation, RequestProfile

_RTT, _PREFILL, _STEP, _COLD = (
    TERMS.index(name) for name in ("rtt", "prefill", "step", "cold_start")
)


def cached_rows(
    index: PrefixIndex, view: FleetView, profile: RequestProfile, now: float
) -> dict[int, float]:
    """Cached prompt tokens per row of ``view`` holding at least the first block."""
    hashes = matching_chain(profile.prefix_hashes, profile.block_tokens, index.block_tokens)
    hits = index.cached_tokens(hashes, now) if hashes else None
    if not hits:
        return {}
    where, prompt = view.index, float(profile.prompt_tokens)
    return {
        row: min(float(tokens), prompt)
        for backend, tokens in hits.items()
        if (row := where.get(backend)) is not None
    }


def cached_by_row(index: PrefixIndex, ctx: ScoreContext) -> F64:
    """Cached prompt tokens per eligible row, from the prefix index."""
    hits = cached_rows(index, ctx.view, ctx.profile, ctx.now)
    if not hits:
        return np.zeros(len(ctx.rows))
    full = np.zeros(len(ctx.view))
    full[list(hits)] = list(hits.values())
    cached: F64 = full[ctx.rows]
    return cached


def record(
    index: PrefixIndex, backend: str, hashes: tuple[int, ...], block_tokens: int, now: float
) -> None:
    """``backend`` was sent (or served) this chain; converted to the index's block size."""
    chain = matching_chain(hashes, block_tokens, index.block_tokens)
    if chain:
        index.record(backend, chain, now)


class PredictedTTFTScorer:
    def __init__(self, params: PredictedTTFTParams) -> None:
        self.index = PrefixIndex(
            params.block_tokens,
            params.prefix_ttl_s,
            params.prefix_max_entries_per_backend,
            max(params.prefix_max_entries_total, params.prefix_max_entries_per_backend),
            min(params.prefix_refresh_s, 0.1 * params.prefix_ttl_s),
        )
        self.learner = OnlineLearner(
            LearnerParams(
                alpha=params.learning_rate,
                bias_alpha=params.bias_learning_rate,
                peer_weight=params.peer_weight,
                half_life_s=params.learned_half_life_s,
            )
        )
        self.predictor_params = PredictorParams(
            same_region_rtt_ms=params.same_region_rtt_ms,
            unknown_rtt_ms=params.unknown_rtt_ms,
            default_output_tokens=params.default_output_tokens,
            default_prompt_tokens=params.default_prompt_tokens,
            stale_after_s=params.stale_after_s,
            cold_ramp=params.cold_ramp,
            itl_batch_slope=params.itl_batch_slope,
            keep_warm_after=params.keep_warm_after,
            evidence_horizon_s=params.explore_horizon_s,
            interactive_decode_weight=params.interactive_decode_weight,
            others_decode_weight=params.others_decode_weight,
            others_prefill_weight=params.others_prefill_weight,
            interactive_ttft_slack_ms=params.interactive_ttft_slack_ms,
        )
        self.learned = LearnedColumns(
            self.learner, params.default_output_tokens, params.default_prompt_tokens
        )
        self.row_terms = RowTerms(self.predictor_params)
        self.step_clock = StepClock()  # tokens seen: step ends
        self.row_terms.step_clock = self.step_clock if params.step_phase else None
        self.explorer = Explorer(
            ExploreParams(
                share=params.explore_share, after_s=params.explore_after_s,
                horizon_s=params.explore_horizon_s, within_ms=params.explore_within_ms,
                within_rel=params.explore_within_rel, recheck_s=params.explore_recheck_s,
                backoff_after=params.explore_backoff_after, backoff_max=params.explore_backoff_max,
            )
        )  # fmt: skip
        self.prewarm = PrewarmParams(params.prewarm_share, params.prewarm_after)
        # Requests with no first token yet (routing.awaiting); the router reports the outcomes.
        self.awaiting = AwaitingFirstToken(
            OverdueParams(params.first_token_overdue_factor, params.first_token_overdue_ms)
        )
        self._exploring: Exploration | None = None
        self.params = params
        self._view: FleetView | None = None
        self._load: LoadColumns | None = None

    def _sync(self, view: FleetView, load: LoadColumns, now: float) -> None:
        self._view, self._load = view, load
        load.expire(now)
        self.learner.decay(now)
        for backend in list(self.learner.shifted):  # a few at most: steps are rare
            row = view.index.get(backend)
            if row is not None:
                self.learner.reconcile_rtt(backend, view.rtt_ms.item(row))
        self.row_terms.sync(view, load, self.learned, self.learned.sync(view))

    def warm_up(self, view: FleetView, load: LoadColumns, now: float) -> tuple[str, ...]:
        if self.prewarm.share <= 0.0:
            return ()
        self._sync(view, load, now)
        rt = self.row_terms
        rows = warm_up_rows(view, rt, self.prewarm, now)
        for row in rows:
            cold_ms = self.learned.cold_start_ms.item(row)
            possibly_cold = now >= rt.warm_until.item(row)
            load.warmed(row, now, now + cold_ms / 1000.0 if possibly_cold else None)
        return tuple(view.names[row] for row in rows)

    def score(self, ctx: ScoreContext) -> Scores:
        view = ctx.view
        self._sync(view, ctx.load, ctx.now)
        cached = cached_rows(self.index, view, ctx.profile, ctx.now)
        pred = predict(
            view, ctx.rows, ctx.profile, ctx.now, cached, ctx.load, self.learned, self.row_terms
        )
        long_form = ctx.profile.latency_class is LatencyClass.LONG_FORM
        basis = "predicted end-to-end (ms)" if long_form else "predicted TTFT (ms)"
        p = self.params
        credited = keep_warm_positions(
            view, ctx.rows, ctx.load, self.row_terms, ctx.now, p.keep_warm_margin_ms
        )
        values, mode = pred.score, ""
        if credited:
            values, mode = pred.score.copy(), "keep-warm credit offered"
            values[credited] -= p.keep_warm_margin_ms
        late = self.awaiting.overdue(ctx.now)
        if late:  # before the explorer looks: a backend that owes a first token is no candidate
            values = values if credited else values.copy()
            index = view.index
            ms_of = {row: ms for b, ms in late.items() if (row := index.get(b)) is not None}
            for position in eligible_positions(ctx.rows, len(view), sorted(ms_of)):
                values[position] += ms_of[ctx.rows.item(position)]  # the row it names
            mode = _owing(mode, late)
        explore = self._exploring = self.explorer.candidate(
            values, pred.ttft_ms, ctx.rows, self.learned, ctx.profile, ctx.now
        )
        if explore is None:
            return Scores(values, basis, pred, mode=mode)
        # Strictly below the best by more than the picker's margin: the picker must take it.
        best = float(values.min())
        values = values.copy()
        values[explore.position] = best - p.margin_ms - p.margin_rel * abs(best) - 1.0
        why = explore.describe(view.names[explore.row])
        return Scores(values, basis, pred, mode=why, explored=True)

    def score_rows(
        self,
        view: FleetView,
        rows: Sequence[int],
        profile: RequestProfile,
        now: float,
        load: LoadColumns,
    ) -> RowScores:
        """``score`` for a few rows with Python floats (routing.policies.scalar_ttft)."""
        self._sync(view, load, now)
        cached = cached_rows(self.index, view, profile, now)
        rt = self.row_terms
        preds = predict_rows(view, rows, profile, now, cached, load, self.learned, rt)
        long_form = profile.latency_class is LatencyClass.LONG_FORM
        basis = "predicted end-to-end (ms)" if long_form else "predicted TTFT (ms)"
        p = self.params
        values, mode = [pred.score for pred in preds], ""
        credit = keep_warm_rows(rows, load, rt, now, p.keep_warm_margin_ms)
        if credit is not None:
            values = [value - off for value, off in zip(values, credit, strict=True)]
            mode = "keep-warm credit offered"
        late = self.awaiting.overdue(now)
        if late:
            names = view.names
            values = [v + late.get(names[row], 0.0) for v, row in zip(values, rows, strict=True)]
            mode = _owing(mode, late)
        explore = self._exploring = self.explorer.candidate_rows(
            values, [pred.ttft_ms for pred in preds], rows, self.learned, profile, now
        )
        if explore is None:
            return RowScores(values, basis, preds, cached, mode)
        best = min(values)
        values[explore.position] = best - p.margin_ms - p.margin_rel * abs(best) - 1.0
        why = explore.describe(view.names[explore.row])
        return RowScores(values, basis, preds, cached, mode=why, explored=True)

    def capture_row(self, view: FleetView, prediction: RowPrediction, now: float) -> RowInputs:
        row = prediction.row
        evidence = self.row_terms.evidence(view, self.learned, row)
        terms, ttft = phased(
            self.row_terms.step_clock, view.names[row], now, prediction.terms, prediction.ttft_ms,
            self.row_terms.decode.item(row),
        )  # fmt: skip
        return row_inputs(
            evidence, terms, ttft, now, prediction.cold_prob, False, prediction.placement_ms,
            self.predictor_params,
        )  # fmt: skip

    def decided(self, ctx: ScoreContext, row: int, scores: Scores, position: int) -> None:
        self._committed(ctx.view, ctx.profile, ctx.now, row)
        pred = scores.predicted()  # this scorer always predicts
        self.awaiting.sent(ctx.view.names[row], ctx.now, pred.ttft_ms.item(row))
        work_ms = pred.term("prefill", row) + pred.term("step", row)
        first_token_ms = pred.ttft_ms.item(row) - 0.5 * pred.term("rtt", row)
        self._ahead(ctx.load, ctx.view, ctx.now, row, pred.term("cold_start", row), work_ms,
                    first_token_ms)  # fmt: skip

    def decided_row(
        self,
        view: FleetView,
        load: LoadColumns,
        profile: RequestProfile,
        now: float,
        prediction: RowPrediction,
    ) -> None:
        row, terms = prediction.row, prediction.terms
        self._committed(view, profile, now, row)
        self.awaiting.sent(view.names[row], now, prediction.ttft_ms)
        first_token_ms = prediction.ttft_ms - 0.5 * terms[_RTT]
        self._ahead(load, view, now, row, terms[_COLD], terms[_PREFILL] + terms[_STEP],
                    first_token_ms)  # fmt: skip

    def _committed(self, view: FleetView, profile: RequestProfile, now: float, row: int) -> None:
        explore = self._exploring
        self.explorer.committed(explore is not None and explore.row == row, row)
        if profile.prefix_hashes:
            # Optimistic: the next request with this prefix will queue behind this one anyway.
            record(self.index, view.names[row], profile.prefix_hashes, profile.block_tokens, now)

    def _ahead(
        self,
        load: LoadColumns,
        view: FleetView,
        now: float,
        row: int,
        cold_term_ms: float,
        prefill_and_step_ms: float,
        first_token_ms: float,
    ) -> None:
        """What the committed request puts ahead of later ones on ``row``."""
        cold_ms = self.learned.cold_start_ms.item(row)
        if 0 < cold_ms <= 2.0 * cold_term_ms:
            load.ledger.mark_warming(view.names[row], now + cold_ms / 1000.0)
        # Until its first token leaves the engine, this request's prefill (and the decode steps
        # it spans) is ahead of every later one there.
        work_ms = prefill_and_step_ms - 0.5 * self.row_terms.decode.item(row)
        load.prefilling.describe(row, now, now + first_token_ms / 1000.0, work_ms)

    def note_remote_prefix(self, backend: str, blocks: Mapping[int, float], now: float) -> int:
        return self.index.merge(backend, blocks, now)

    def purge_step(self, now: float, max_scan: int) -> PurgeProgress:
        return self.index.purge_step(now, max_scan)

    def observe_first_token(self, observation: Observation) -> None:
        self.step_clock.seen(observation.backend, observation.at)
        view = self._view
        row = None if view is None else view.index.get(observation.backend)
        spec = None if view is None or row is None else view.specs[row]
        queued = self._engine_queued(row, self._depth_of(observation.backend))
        self.learner.observe_first_token(self._current_offsets(observation, row), spec, queued)

    def _depth_of(self, backend: str) -> float | None:
        load = self._load
        return None if load is None else load.depth_of(backend)

    def _engine_queued(self, row: int | None, depth: float | None) -> bool:
        """Whether the engine of ``row`` has a queue now: requests waiting at the last scrape,
        or a batch as full as its ``max_num_seqs`` by the latest count (``depth``, the
        backend's in-flight requests; routing.learner)."""
        view = self._view
        if view is None or row is None:
            return False
        if view.waiting0.item(row) > 0.0:
            return True
        return depth is not None and depth >= view.max_num_seqs.item(row)

    def learned_frame(self, backend: str) -> LearnedFrame | None:
        view = self._view
        row = None if view is None else view.index.get(backend)
        return None if row is None else self.learned.frame_at(row)

    def observe_peer_first_token(self, first: FirstToken, frame: LearnedFrame) -> None:
        """Learn a peer's first token in this scorer's frame (routing.peer_learning). Not a
        step of this router's own clock: the peer's times cross a process (or host) boundary
        and the phase wants the engine's step to the millisecond."""
        view = self._view
        row = None if view is None else view.index.get(first.backend)
        if view is None or row is None:
            return  # a backend this router has not seen in its fleet: nothing to re-express
        spec = view.specs[row]
        mine = self.learned.frame_now(first.backend, spec)  # the columns wait for a decision
        observation = reexpressed(first, frame, mine).observation()
        queued = self._engine_queued(row, self._depth_of(first.backend))
        self.learner.observe_first_token(self._current_offsets(observation, row), spec, queued)

    def _current_offsets(self, observation: Observation, row: int | None) -> Observation:
        """``observation`` with its predicted RTT and learned offset replaced by what they
        are now, so it is learned against today's model, not the one it was routed with.

        RTT: a request in flight when a probe saw the RTT jump paid the new one, which the
        prediction already follows; learned again as an offset it would count twice.
        Offset: requests in flight when a level shift was confirmed come back with a
        prediction that lacks it; against it each looked like a new candidate step and taught
        the slow part the pending clip (~18 ms), held when no third candidate came. Scenario
        5, seed 5: us-east-1's offset stood +36 ms after its spell (share 25% against 34%)."""
        terms = observation.predicted_terms_ms
        view = self._view
        if row is None or view is None or not terms:
            return observation
        # Compared before copied: on most first tokens neither has moved since the decision.
        rtt, bias = terms.get("rtt"), terms.get("bias")
        rtt_now = rtt if rtt is None else self.row_terms.rtt.item(row)
        bias_now = (
            bias if bias is None else self.learned.bias_now_ms(observation.backend, view.specs[row])
        )
        if rtt_now == rtt and bias_now == bias:
            return observation
        moved = {name: ms for name, ms in (("rtt", rtt_now), ("bias", bias_now)) if ms is not None}
        return replace(observation, predicted_terms_ms={**terms, **moved})

    def observe(self, observation: Observation) -> None:
        view = self._view
        row = None if view is None else view.index.get(observation.backend)
        spec, itl_scale = None, 1.0
        depth = self._depth_of(observation.backend)
        if view is not None and row is not None:
            spec = view.specs[row]
            if depth is not None:  # the batch it decoded in, as the latest signals show it
                seqs = view.max_num_seqs.item(row)
                itl_scale = self.row_terms.batch_scale(min(depth + 1.0, seqs), seqs)
        queued = self._engine_queued(row, depth)
        self.learner.observe(self._current_offsets(observation, row), spec, itl_scale, queued)
        if observation.ok:  # the stream's last token: a step ended there
            self.step_clock.seen(observation.backend, observation.at)
        if observation.ok and observation.prefix_hashes:
            record(
                self.index, observation.backend, observation.prefix_hashes,
                observation.block_tokens, observation.at,
            )  # fmt: skip


def build(params: PredictedTTFTParams, rng_seed: int) -> PipelineRouter:
    return FusedTTFTRouter(
        "predicted_ttft",
        default_filters(params.max_queue_ratio),
        PredictedTTFTScorer(params),
        MarginPicker(params.margin_ms, params.margin_rel),
        rng_seed,
        max_ranked=params.max_ranked,
        inflight_ttl_s=params.inflight_ttl_s,
    )


def _owing(mode: str, late: Mapping[str, float]) -> str:
    """``mode`` with the backends that owe a first token (explain says why they lost)."""
    owing = ", ".join(f"{backend} +{ms:.0f} ms" for backend, ms in sorted(late.items()))
    return f"{mode}; first token overdue: {owing}" if mode else f"first token overdue: {owing}"
