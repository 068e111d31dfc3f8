"""The backend closest in network terms: the client's own region first, then the lowest RTT.

Within the nearest set the choice is random, so a region's backends share its traffic.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from routing.pipeline.pickers import BestPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scores, StatelessScorer
from routing.policies.params import CommonParams, assemble


class NearestRegionParams(CommonParams):
    unknown_rtt_ms: float = Field(
        default=100.0, ge=0, description="RTT assumed where none is known"
    )


class NearestRegionScorer(StatelessScorer):
    def __init__(self, params: NearestRegionParams) -> None:
        self.unknown_rtt_ms = params.unknown_rtt_ms

    def score(self, ctx: ScoreContext) -> Scores:
        view, rows, origin = ctx.view, ctx.rows, ctx.profile.origin
        rtt = np.nan_to_num(view.rtt_ms[rows], nan=self.unknown_rtt_ms)
        if origin is not None:
            home = np.fromiter((view.regions[r] == origin for r in rows.tolist()), np.bool_)
            rtt = np.where(home, 0.0, rtt)
        # Region-level distance: backends of one region tie and share the load at random.
        return Scores(np.round(rtt, 0), "round trip to its region (ms)")


def build(params: NearestRegionParams, rng_seed: int) -> PipelineRouter:
    return assemble("nearest_region", params, NearestRegionScorer(params), BestPicker(), rng_seed)
