"""llm-d inference scheduler style: weighted scorers in [0, 1], then the maximum score.

Scorers, as llm-d describes them: ``queue`` — waiting requests, min-max normalised so the
shortest queue scores 1; ``kv_cache`` — 1 - KV-cache utilisation; ``prefix`` — the fraction of
the prompt's blocks the endpoint is believed to hold (from what the scheduler routed there).
Defaults follow the published default profile (prefix 3, queue 2, kv-cache 2). Endpoints
without engine metrics fall back to local in-flight counts for the queue and 0.5 for KV use.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from routing.fleet_view import F64
from routing.pipeline.pickers import BestPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scores
from routing.policies.params import CommonParams, assemble
from routing.policies.predicted_ttft import cached_by_row
from routing.policies.prefix_memory import RemembersChosenPrefix
from routing.prefix_index import PrefixIndex


class LlmDParams(CommonParams):
    prefix_weight: float = Field(default=3.0, ge=0)
    queue_weight: float = Field(default=2.0, ge=0)
    kv_cache_weight: float = Field(default=2.0, ge=0)
    block_tokens: int = Field(default=16, gt=0)
    prefix_ttl_s: float = Field(default=600.0, gt=0)
    prefix_max_entries_per_backend: int = Field(default=200_000, gt=0)


def queue_score(queue: F64) -> F64:
    low, high = float(queue.min()), float(queue.max())
    if high == low:
        return np.ones(len(queue))
    scored: F64 = (high - queue) / (high - low)
    return scored


class LlmDScorer(RemembersChosenPrefix):
    def __init__(self, params: LlmDParams) -> None:
        self.params = params
        per_backend = params.prefix_max_entries_per_backend
        self.index = PrefixIndex(
            params.block_tokens, params.prefix_ttl_s, per_backend, per_backend * 1000
        )

    def score(self, ctx: ScoreContext) -> Scores:
        view, rows, p = ctx.view, ctx.rows, self.params
        local = np.maximum(
            np.maximum(view.in_flight[rows], ctx.load.open[rows]) - view.max_num_seqs[rows], 0.0
        )
        waiting = view.waiting[rows] + ctx.load.after_metrics[rows]
        queue = np.where(np.isnan(waiting), local, waiting)
        kv = 1.0 - np.nan_to_num(view.kv_cache_usage[rows], nan=0.5)
        blocks = len(ctx.profile.prefix_hashes)
        prefix = (
            cached_by_row(self.index, ctx) / (blocks * p.block_tokens)
            if blocks
            else np.zeros(len(rows))
        )
        total = (
            p.prefix_weight * prefix + p.queue_weight * queue_score(queue) + p.kv_cache_weight * kv
        )
        return Scores(-total, "-weighted score (prefix, queue, kv-cache)")


def build(params: LlmDParams, rng_seed: int) -> PipelineRouter:
    return assemble("llm_d", params, LlmDScorer(params), BestPicker(), rng_seed)
