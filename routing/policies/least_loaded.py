"""Fewest requests in flight from this gateway tier (ties at random)."""

from __future__ import annotations

import numpy as np

from routing.pipeline.pickers import BestPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scores, StatelessScorer
from routing.policies.params import CommonParams, assemble


class InFlightScorer(StatelessScorer):
    def score(self, ctx: ScoreContext) -> Scores:
        rows = ctx.rows
        values = np.maximum(ctx.view.in_flight[rows], ctx.load.open[rows])
        return Scores(values, "requests in flight")


def build(params: CommonParams, rng_seed: int) -> PipelineRouter:
    return assemble("least_loaded", params, InFlightScorer(), BestPicker(), rng_seed)
