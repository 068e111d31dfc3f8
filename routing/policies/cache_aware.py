"""SGLang router's ``cache_aware`` policy, as its documentation and source comments describe it.

The router keeps an approximate tree of the prompts it sent to each worker (here: the prefix
index, recorded at routing time as SGLang inserts into its tree). Load is the router's count
of requests in flight per worker. The system is *imbalanced* when both
``max_load - min_load > balance_abs_threshold`` and ``max_load > balance_rel_threshold x
min_load``; then the least-loaded worker wins. Otherwise, the worker with the longest prefix
match wins if ``matched / prompt > cache_threshold``; if no match is good enough, the worker
with the smallest tree (most free cache) wins.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from routing.pipeline.pickers import BestPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scores
from routing.policies.params import CommonParams, assemble
from routing.policies.predicted_ttft import cached_by_row
from routing.policies.prefix_memory import RemembersChosenPrefix
from routing.prefix_index import PrefixIndex


class CacheAwareParams(CommonParams):
    cache_threshold: float = Field(default=0.3, ge=0, le=1)
    balance_abs_threshold: float = Field(default=64.0, ge=0)
    balance_rel_threshold: float = Field(default=1.5, ge=1)
    block_tokens: int = Field(default=16, gt=0)
    tree_ttl_s: float = Field(default=600.0, gt=0)
    max_tree_entries_per_backend: int = Field(default=200_000, gt=0)


class CacheAwareScorer(RemembersChosenPrefix):
    def __init__(self, params: CacheAwareParams) -> None:
        self.params = params
        per_backend = params.max_tree_entries_per_backend
        self.index = PrefixIndex(
            params.block_tokens, params.tree_ttl_s, per_backend, per_backend * 1000
        )

    def score(self, ctx: ScoreContext) -> Scores:
        p = self.params
        load = np.maximum(ctx.view.in_flight[ctx.rows], ctx.load.open[ctx.rows])
        high, low = float(load.max()), float(load.min())
        if high - low > p.balance_abs_threshold and high > p.balance_rel_threshold * low:
            return Scores(load, "requests in flight", mode="imbalanced: shortest queue")
        matched = cached_by_row(self.index, ctx)
        prompt = max(ctx.profile.prompt_tokens, 1)
        if float(matched.max()) / prompt > p.cache_threshold:
            # Longest match first; among equal matches the less loaded (SGLang keeps one).
            values = -matched + load / (high + 1.0)
            return Scores(values, "-matched prefix tokens", mode="cache affinity")
        names = ctx.view.names
        tree = np.fromiter((self.index.entries(names[r]) for r in ctx.rows.tolist()), np.float64)
        return Scores(tree, "prefix tree size (blocks)", mode="no good match: smallest tree")


def build(params: CacheAwareParams, rng_seed: int) -> PipelineRouter:
    return assemble("cache_aware", params, CacheAwareScorer(params), BestPicker(), rng_seed)
