"""Uniformly random choice among eligible backends (seeded)."""

from __future__ import annotations

import numpy as np

from routing.pipeline.pickers import BestPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scores, StatelessScorer
from routing.policies.params import CommonParams, assemble


class RandomScorer(StatelessScorer):
    def score(self, ctx: ScoreContext) -> Scores:
        values = np.fromiter((ctx.rng.random() for _ in range(len(ctx.rows))), np.float64)
        return Scores(values, "random draw")


def build(params: CommonParams, rng_seed: int) -> PipelineRouter:
    return assemble("random", params, RandomScorer(), BestPicker(), rng_seed)
