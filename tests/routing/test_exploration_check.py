"""The exploration check's array path (``Explorer.candidate``) finds what its Python-float twin
(``candidate_rows``, the scalar decision path's) finds, float for float: whether a few rows or
many are near the best, for every eligible row or a subset, with and without a deadline, and
with rows whose horizon a back-off grew (or whose streak no longer holds)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from routing.exploration import ExploreParams, Explorer, _Streak
from routing.learned_columns import LearnedColumns
from routing.learner import LearnerParams, OnlineLearner
from routing.types import RequestProfile

NOW = 100.0
_row = st.tuples(
    st.sampled_from([10.0, 10.5, 30.0, 60.0, 200.0, 1000.0]),  # score: clusters and outliers
    st.one_of(st.none(), st.floats(0.0, 20.0)),  # evidence age (None: never observed)
    st.sampled_from([-30.0, -0.0, 0.0, 5.0, 40.0, 500.0]),  # learned offset
)


def _explorer(streaks: dict[int, tuple[int, float]]) -> Explorer:
    explorer = Explorer(ExploreParams(share=1.0, after_s=5.0, horizon_s=10.0, within_ms=20.0))
    explorer.credit = 1.0
    # Streaks as committed explorations leave them (private: built here, not by 30 decisions).
    explorer._streaks = {row: _Streak(n, offset) for row, (n, offset) in streaks.items()}
    return explorer


@settings(max_examples=150, deadline=None)
@given(
    fleet=st.lists(_row, min_size=2, max_size=40),
    subset=st.booleans(),
    deadline_s=st.one_of(st.none(), st.sampled_from([0.05, 0.5])),
    streaks=st.dictionaries(
        st.integers(0, 39),
        st.tuples(st.integers(1, 6), st.sampled_from([5.0, 40.0, 500.0, 2000.0])),
        max_size=6,
    ),
)
@example(
    fleet=[(10.0, 9.0, 40.0)] * 20 + [(10.5, 12.0, 5.0)] * 20,
    subset=False,
    deadline_s=None,
    streaks={},
)
@example(fleet=[(10.0, 9.0, 40.0), (10.5, 12.0, 5.0)] * 12, subset=True, deadline_s=0.5, streaks={})
@example(
    fleet=[(10.0, 9.0, 40.0), (10.5, 12.0, 5.0)] * 12, subset=False, deadline_s=0.05, streaks={}
)
@example(fleet=[(10.0, 1.0, 40.0)] * 20, subset=False, deadline_s=None, streaks={})  # all fresh
@example(  # many rows near (the array path), some with grown horizons, one streak broken
    fleet=[(10.0, 1.0, 0.0)] + [(30.0, 12.0, 40.0)] * 20,
    subset=False,
    deadline_s=None,
    streaks={1: (4, 40.0), 2: (6, 40.0), 3: (3, 500.0)},
)
def test_the_array_check_finds_what_the_float_check_finds(
    fleet: list[tuple[float, float | None, float]],
    subset: bool,
    deadline_s: float | None,
    streaks: dict[int, tuple[int, float]],
) -> None:
    learned = LearnedColumns(OnlineLearner(LearnerParams()), 256, 512)
    learned.learned_at = np.array([np.nan if age is None else NOW - age for _, age, _ in fleet])
    learned.bias_ms = np.array([bias for _, _, bias in fleet])
    rows = np.arange(len(fleet))[::2] if subset else np.arange(len(fleet))
    scores = np.array([fleet[row][0] for row in rows.tolist()])
    ttft = np.array([score + 1.0 for score, _, _ in fleet])  # the view's rows
    profile = RequestProfile(model="m", deadline_s=deadline_s)
    vector = _explorer(streaks).candidate(scores, ttft, rows, learned, profile, NOW)
    scalar = _explorer(streaks).candidate_rows(
        scores.tolist(), ttft[rows].tolist(), rows.tolist(), learned, profile, NOW
    )
    assert vector == scalar
    if vector is not None:
        assert type(vector.row) is int and type(vector.age_s) is float
