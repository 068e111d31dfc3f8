"""The scalar decision path of ``predicted_ttft``: fleets of a few backends, without numpy.

The fused path (``routing.policies.fused_ttft``) costs a few dozen vector operations a
decision whatever the fleet size. With a handful of backends that per-call cost is the
decision, and at concurrency 1 it is several times worse: after an idle gap every distinct
numpy call costs 5-30 us instead of ~0.5 (docs/results/perf-issue16.md). So for a fleet of
at most ``SCALAR_MAX_BACKENDS`` the fused router filters, predicts, credits, explores, picks
and ranks the eligible rows with Python floats (``routing.predictor_scalar``): the same
formulas in the same order, hence the same floats, the same random draws and the same state
afterwards. tests/routing/test_fused_ttft.py drives it beside the generic pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from routing.fleet_view import FleetView
from routing.load import LoadColumns
from routing.pipeline.candidates import chosen_reason
from routing.pipeline.lazy_candidate import LazyCandidate, RankContext
from routing.predictor_detail import RowInputs
from routing.predictor_scalar import RowPrediction
from routing.types import Candidate, RequestProfile

# Up to this many backends in the view the scalar path decides (measured: at 8 it is still
# cheaper hot than the vector one, and much cheaper after an idle gap).
SCALAR_MAX_BACKENDS = 8


@dataclass(frozen=True, slots=True)
class RowScores:
    """``Scores`` of the scalar path: everything aligned with the eligible rows."""

    values: list[float]  # lower is better
    basis: str
    predictions: list[RowPrediction]
    cached: Mapping[int, float]  # row -> cached prompt tokens, for rows holding any
    mode: str = ""
    explored: bool = False


@runtime_checkable
class RowScorer(Protocol):
    """A scorer that also scores a few rows with Python floats (``PredictedTTFTScorer``)."""

    def score_rows(
        self,
        view: FleetView,
        rows: Sequence[int],
        profile: RequestProfile,
        now: float,
        load: LoadColumns,
    ) -> RowScores: ...

    def capture_row(self, view: FleetView, prediction: RowPrediction, now: float) -> RowInputs:
        """What ``Prediction.capture`` reads for that row."""
        ...

    def decided_row(
        self,
        view: FleetView,
        load: LoadColumns,
        profile: RequestProfile,
        now: float,
        prediction: RowPrediction,
    ) -> None:
        """``Scorer.decided`` for the row of ``prediction``."""
        ...


def row_candidates(
    view: FleetView,
    order: Sequence[int],
    scored: RowScores,
    among: int,
    capture: Callable[[RowPrediction], RowInputs],
) -> tuple[Candidate, ...]:
    """``build_candidates`` for the scalar path (``order``: positions, the chosen one first)."""
    predictions, values, cached = scored.predictions, scored.values, scored.cached
    picked = [predictions[position] for position in order]
    inputs = [capture(prediction) for prediction in picked]
    reason = chosen_reason(scored.basis, scored.mode, among)
    context = RankContext(scored.basis, values[order[0]], reason, inputs[0])
    return tuple(
        LazyCandidate.build(
            view.names[prediction.row],
            values[position],
            captured,
            prediction.e2e_ms,
            int(cached.get(prediction.row, 0)),
            context,
        )
        for prediction, position, captured in zip(picked, order, inputs, strict=True)
    )
