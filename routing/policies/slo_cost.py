"""``slo_cost``: the cheapest backend whose predicted p90 TTFT meets the request's objective.

Among the candidates whose predicted p90 TTFT is within the request's objective
(``RequestProfile.ttft_objective_ms``, else ``default_objective_ms``), the lowest expected cost
for this request (``routing.cost``: uncached prompt x prompt price + cached x cached price +
expected output x completion price, plus the utilisation-based marginal part of hourly
capacity). When none meets it, or the request has no objective, the fastest, exactly as
``predicted_ttft`` would choose. Near-ties spread as there (anti-herding): among those meeting,
every candidate within ``cost_margin_rel`` of the cheapest is drawn among.

Ranking (fallback order) is: those meeting the objective by cost, then the rest by predicted
TTFT. A candidate's ``score`` is its expected cost when it meets the objective, else
``MISSES_OBJECTIVE`` + its predicted TTFT (ms); ``expected_cost`` and the reason say which.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from pydantic import Field

from routing.cost import expected_cost
from routing.fleet_view import F64
from routing.pipeline.pickers import MarginPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scores
from routing.policies.params import assemble
from routing.policies.predicted_ttft import PredictedTTFTScorer
from routing.policies.predicted_ttft_params import PredictedTTFTParams
from routing.predictor import Prediction
from routing.predictor_detail import breakdown
from routing.types import Candidate

MISSES_OBJECTIVE = 1e9  # score offset of candidates predicted to miss the objective


class SloCostParams(PredictedTTFTParams):
    default_objective_ms: float | None = Field(
        default=None,
        gt=0,
        description="p90 TTFT objective (ms) for requests that carry none (None: those go "
        "to the fastest, as predicted_ttft)",
    )
    cost_margin_rel: float = Field(
        default=0.02,
        ge=0,
        description="among candidates meeting the objective, spread over those within this "
        "fraction of the cheapest",
    )


def p90_within(pred: Prediction, rows: Sequence[int], objective_ms: float) -> F64:
    """Predicted p90 TTFT per row of ``rows`` (NaN where the point prediction already misses
    ``objective_ms``: a p90 is never below it, so there is no need to work it out)."""
    out = np.full(len(rows), np.nan)
    ttft = pred.ttft_ms
    for position, row in enumerate(rows):
        if ttft.item(row) <= objective_ms:
            out[position] = breakdown(pred.capture(row)).ttft_p90_ms
    return out


class SloCostScorer(PredictedTTFTScorer):
    def __init__(self, params: SloCostParams) -> None:
        super().__init__(params)
        self.slo = params

    def score(self, ctx: ScoreContext) -> Scores:
        fastest = super().score(ctx)
        profile = ctx.profile
        objective = profile.ttft_objective_ms or self.slo.default_objective_ms
        if objective is None:
            return replace(fastest, mode="no TTFT objective: fastest")
        pred = fastest.predicted()  # the predicted-TTFT scorer always predicts
        rows = ctx.rows.tolist()
        p90 = p90_within(pred, rows, objective)
        meets = p90 <= objective  # NaN compares False
        output = profile.max_tokens or self.params.default_output_tokens
        cost = expected_cost(
            ctx.view, ctx.rows, profile.prompt_tokens, pred.cached, output, ctx.load.depth
        )
        values = np.where(meets, cost, MISSES_OBJECTIVE + fastest.values)
        count = int(meets.sum())
        if count:
            basis = (
                f"expected cost among {count} of {len(rows)} meeting p90 TTFT <= {objective:g} ms"
            )
        else:
            basis = f"predicted TTFT (ms); none of {len(rows)} meets p90 <= {objective:g} ms"
        notes = _Annotator(objective, cost, p90, meets)
        return Scores(values, basis, pred, fastest.mode, annotate=notes.annotate)


class _Annotator:
    """Adds each ranked candidate's expected cost and why it met or missed the objective."""

    def __init__(self, objective_ms: float, cost: F64, p90: F64, meets: np.ndarray) -> None:
        self.objective_ms = objective_ms
        self.cost, self.p90, self.meets = cost, p90, meets

    def annotate(
        self, ranked: tuple[Candidate, ...], order: Sequence[int]
    ) -> tuple[Candidate, ...]:
        chosen_cost = self.cost.item(order[0])
        out = []
        for rank, (candidate, position) in enumerate(zip(ranked, order, strict=True)):
            cost = self.cost.item(position)
            p90 = candidate.predicted_ttft_p90_ms
            bound = f"{self.objective_ms:g} ms"
            if self.meets[position]:
                why = f"meets the objective (p90 {p90:.1f} <= {bound}), expected cost {cost:.6g}"
                if rank:
                    why += f" vs {chosen_cost:.6g} for the chosen one"
            else:
                why = f"misses the objective (p90 {p90:.1f} > {bound}), expected cost {cost:.6g}"
            reason = f"{candidate.reason}; {why}" if rank == 0 else why
            out.append(replace(candidate, expected_cost=cost, reason=reason))
        return tuple(out)


class CostMarginPicker:
    """Among candidates meeting the objective (score below ``MISSES_OBJECTIVE``), uniformly
    within ``cost_margin_rel`` of the cheapest; otherwise ``fallback`` over predicted TTFT."""

    def __init__(self, cost_margin_rel: float, fallback: MarginPicker) -> None:
        self.cost_margin_rel = cost_margin_rel
        self.fallback = fallback

    def pick(self, scores: F64, rng: random.Random) -> tuple[int, int]:
        best = float(scores.min())
        if best >= MISSES_OBJECTIVE:
            return self.fallback.pick(scores - MISSES_OBJECTIVE, rng)
        near = np.flatnonzero(scores <= best + abs(best) * self.cost_margin_rel)  # best may be < 0
        if len(near) == 1:
            return int(near[0]), 1
        return int(near[rng.randrange(len(near))]), len(near)


def build(params: SloCostParams, rng_seed: int) -> PipelineRouter:
    picker = CostMarginPicker(
        params.cost_margin_rel, MarginPicker(params.margin_ms, params.margin_rel)
    )
    return assemble("slo_cost", params, SloCostScorer(params), picker, rng_seed)
