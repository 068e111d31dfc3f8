"""The oracle (simulation only): ranks by the latency each backend *will* really deliver.

The simulator owns the truth: it implements ``OracleTruth`` from its own engine state (the
queue and cache each backend will have when this request arrives) and hands it to
``build_router("oracle", ..., oracle_truth=...)``. The gateway never builds this policy.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from routing.pipeline.pickers import BestPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scores, StatelessScorer
from routing.policies.params import CommonParams, assemble
from routing.types import LatencyClass, RequestProfile


class OracleTruth(Protocol):
    def latency_ms(self, backend: str, profile: RequestProfile, now: float) -> float | None:
        """What this request would really see on ``backend`` if sent at ``now``: TTFT for
        interactive requests, end-to-end time for long-form ones. None: it would fail."""
        ...


class OracleScorer(StatelessScorer):
    def __init__(self, truth: OracleTruth) -> None:
        self.truth = truth

    def score(self, ctx: ScoreContext) -> Scores:
        names, profile, now = ctx.view.names, ctx.profile, ctx.now
        truths = (self.truth.latency_ms(names[r], profile, now) for r in ctx.rows.tolist())
        values = np.fromiter((np.inf if t is None else t for t in truths), np.float64)
        long_form = profile.latency_class is LatencyClass.LONG_FORM
        return Scores(values, "true end-to-end (ms)" if long_form else "true TTFT (ms)")


def build(params: CommonParams, rng_seed: int, truth: OracleTruth) -> PipelineRouter:
    return assemble("oracle", params, OracleScorer(truth), BestPicker(), rng_seed)
