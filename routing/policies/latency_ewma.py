"""LiteLLM's "latency-based-routing" (lowest latency), as its documentation describes it.

Per deployment, keep the last ``window`` observed latencies (time to first token for streamed
requests) for ``ttl_s``; the score is their average. Deployments with no data score 0 and so
are tried first. Pick at random among those within ``buffer`` x the lowest average. A timed-out
request counts as a very slow one (``timeout_penalty_ms``), as LiteLLM does.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from pydantic import Field

from routing.pipeline.pickers import MarginPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scores, StatelessScorer
from routing.policies.params import CommonParams, assemble
from routing.types import Observation


class LatencyEwmaParams(CommonParams):
    window: int = Field(default=10, ge=1, description="latencies kept per deployment")
    ttl_s: float = Field(default=3600.0, gt=0, description="latencies older than this are dropped")
    buffer: float = Field(
        default=0.0, ge=0, description="random among those within (1+buffer) x best"
    )
    timeout_penalty_ms: float = Field(default=1_000_000.0, ge=0)


class LatencyAverageScorer(StatelessScorer):
    def __init__(self, params: LatencyEwmaParams) -> None:
        self.params = params
        self._samples: dict[str, deque[tuple[float, float]]] = {}

    def average(self, backend: str, now: float) -> float:
        samples = self._samples.get(backend)
        if not samples:
            return 0.0
        while samples and samples[0][0] < now - self.params.ttl_s:
            samples.popleft()
        return sum(ms for _, ms in samples) / len(samples) if samples else 0.0

    def score(self, ctx: ScoreContext) -> Scores:
        names = ctx.view.names
        values = np.fromiter(
            (self.average(names[r], ctx.now) for r in ctx.rows.tolist()), np.float64
        )
        return Scores(values, "average recent latency (ms)")

    def observe(self, observation: Observation) -> None:
        if observation.ok and observation.ttft_ms is not None:
            latency = observation.ttft_ms
        elif observation.error_kind == "timeout":
            latency = self.params.timeout_penalty_ms
        else:
            return
        samples = self._samples.setdefault(observation.backend, deque(maxlen=self.params.window))
        samples.append((observation.at, latency))


def build(params: LatencyEwmaParams, rng_seed: int) -> PipelineRouter:
    picker = MarginPicker(0.0, params.buffer)
    return assemble("latency_ewma", params, LatencyAverageScorer(params), picker, rng_seed)
