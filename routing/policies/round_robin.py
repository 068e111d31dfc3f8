"""Round-robin among eligible backends: the simplest honest baseline."""

from __future__ import annotations

import numpy as np

from routing.pipeline.filters import default_filters
from routing.pipeline.pickers import BestPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scores, StatelessScorer
from routing.policies.params import CommonParams


class RoundRobinScorer(StatelessScorer):
    """Scores each eligible backend by how many turns away it is (0 = its turn now)."""

    def __init__(self) -> None:
        self.turn = 0

    def score(self, ctx: ScoreContext) -> Scores:
        size = len(ctx.rows)
        values = (np.arange(size, dtype=np.float64) - self.turn % size) % size
        return Scores(values, "turns until its round-robin slot")

    def decided(self, ctx: ScoreContext, row: int, scores: Scores, position: int) -> None:
        self.turn += 1


class RoundRobinRouter(PipelineRouter):
    name = "round_robin"

    def __init__(self, params: CommonParams | None = None, rng_seed: int = 0) -> None:
        params = params or CommonParams()
        super().__init__(
            "round_robin",
            default_filters(params.max_queue_ratio),
            RoundRobinScorer(),
            BestPicker(),
            rng_seed,
            max_ranked=params.max_ranked,
            inflight_ttl_s=params.inflight_ttl_s,
        )


def build(params: CommonParams, rng_seed: int) -> PipelineRouter:
    return RoundRobinRouter(params, rng_seed)
