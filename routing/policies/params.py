"""Validated parameters shared by every policy, and the helper that assembles a router."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from routing.pipeline.filters import default_filters
from routing.pipeline.pickers import Picker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import Scorer


class CommonParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_ranked: int = Field(
        default=4, ge=1, description="candidates decide() returns (fallback depth)"
    )
    inflight_ttl_s: float = Field(default=300.0, gt=0, description="forget unreleased reservations")
    max_queue_ratio: float = Field(
        default=4.0, ge=0, description="capacity filter: reject when queued > ratio x max_num_seqs"
    )


def assemble(
    name: str, params: CommonParams, scorer: Scorer, picker: Picker, rng_seed: int
) -> PipelineRouter:
    return PipelineRouter(
        name,
        default_filters(params.max_queue_ratio),
        scorer,
        picker,
        rng_seed,
        max_ranked=params.max_ranked,
        inflight_ttl_s=params.inflight_ttl_s,
    )
