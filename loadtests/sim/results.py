"""Per-request outcomes of one policy's run, as columns (cheap to fill, cheap to summarise)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadtests.sim.fleet import SimBackend

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class ResultColumns:
    def __init__(self, requests: int, backends: int) -> None:
        nan = np.full(requests, np.nan)
        self.backend: I64 = np.full(requests, -1, dtype=np.int64)  # -1: no backend
        self.predicted_ms: F64 = nan.copy()
        self.predicted_p90_ms: F64 = nan.copy()
        self.ttft_ms: F64 = nan.copy()
        self.e2e_ms: F64 = nan.copy()
        self.finish_at: F64 = nan.copy()
        self.output_tokens: I64 = np.zeros(requests, dtype=np.int64)
        self.cached_tokens: I64 = np.zeros(requests, dtype=np.int64)
        # What the summary needs of each request, kept here because the trace is not stored.
        self.prompt_tokens: I64 = np.zeros(requests, dtype=np.int64)
        self.long_form: npt.NDArray[np.bool_] = np.zeros(requests, dtype=np.bool_)
        self.arrived_at: F64 = nan.copy()  # when the request reached its gateway
        self.backends = backends
        self.rejections = 0
        self.explorations = 0  # decisions that went to re-measure a backend (Decision.explored)
        self.explored = np.zeros(requests, dtype=np.bool_)  # ...which requests they were
        # Serverless cost: warm-up requests sent (routing.prewarm), engines woken from zero by
        # any request, and backend-seconds warm out of all serverless backend-seconds.
        self.warm_ups = 0
        self.cold_starts = 0
        self.serverless_warm_s = 0.0
        self.serverless_s = 0.0
        # Objectives, deadlines and spend (docs/slo.md); NaN: the request has none.
        self.objective_ms: F64 = nan.copy()
        self.deadline_ms: F64 = nan.copy()
        self.cost: F64 = np.zeros(requests)
        self.refused = np.zeros(requests, dtype=np.bool_)  # early rejection
        self.would_meet = np.zeros(requests, dtype=np.bool_)  # ...had it been admitted (oracle)

    def arrived(self, i: int, prompt_tokens: int, long_form: bool) -> None:
        self.prompt_tokens[i] = prompt_tokens
        self.long_form[i] = long_form

    def rejected(self, i: int) -> None:
        self.rejections += 1

    def objectives(self, i: int, objective_ms: float | None, deadline_ms: float | None) -> None:
        if objective_ms is not None:
            self.objective_ms[i] = objective_ms
        if deadline_ms is not None:
            self.deadline_ms[i] = deadline_ms

    def refuse(self, i: int, would_meet: bool) -> None:
        self.refused[i] = True
        self.would_meet[i] = would_meet

    def routed(self, i: int, backend: int, predicted: float | None, p90: float | None) -> None:
        self.backend[i] = backend
        if predicted is not None:
            self.predicted_ms[i] = predicted
        if p90 is not None:
            self.predicted_p90_ms[i] = p90

    def finished(self, i: int, at: float, tokens: int) -> None:
        self.finish_at[i] = at
        self.output_tokens[i] = tokens

    def returned(self, i: int, ttft_ms: float, e2e_ms: float, cached: int) -> None:
        self.ttft_ms[i] = ttft_ms
        self.e2e_ms[i] = e2e_ms
        self.cached_tokens[i] = cached


@dataclass(frozen=True, slots=True)
class PolicyRun:
    policy: str
    results: ResultColumns
    backends: Sequence[SimBackend]
    wall_s: float = 0.0
