"""``pick_and_rank`` (one sort) chooses, draws and ranks exactly as ``MarginPicker.pick`` and
``rank``, and leaves them the cases it does not take (one score, large fleets, NaN)."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.pipeline.candidates import pick_and_rank, rank
from routing.pipeline.pickers import MarginPicker

score = st.sampled_from([0.0, 1.0, 2.5, 3.0, 40.0]) | st.floats(-50.0, 500.0)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    values=st.lists(score, min_size=2, max_size=40),
    margins=st.sampled_from([(0.0, 0.0), (2.0, 0.03), (5.0, 0.5)]),
    limit=st.integers(1, 6),
    seed=st.integers(0, 3),
)
def test_one_sort_gives_the_pickers_draw_and_the_rank_order(
    values: list[float], margins: tuple[float, float], limit: int, seed: int
) -> None:
    picker = MarginPicker(*margins)
    scores = np.array(values)
    one, other = random.Random(seed), random.Random(seed)
    fused = pick_and_rank(picker, scores, one, limit)
    chosen, among = picker.pick(scores, other)
    assert fused == (chosen, among, rank(scores, chosen, limit))
    assert one.getstate() == other.getstate()  # the same draws taken


def test_the_cases_left_to_the_picker_and_rank() -> None:
    picker, rng = MarginPicker(2.0, 0.03), random.Random(1)
    assert pick_and_rank(picker, np.array([3.0]), rng, 4) is None
    assert pick_and_rank(picker, np.array([3.0, float("nan"), 1.0]), rng, 4) is None
    assert pick_and_rank(picker, np.arange(256.0), rng, 4) is None
    assert pick_and_rank(picker, 10.0 * np.arange(255.0), rng, 4) == (0, 1, [0, 1, 2, 3])
