"""Pickers: choose one candidate from the scores (lower is better).

Spreading among near-equal candidates is the second half of anti-herding (the first is
in-flight accounting): gateways acting on the same snapshot should not all pick the same one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from routing.fleet_view import F64


class Picker(Protocol):
    def pick(self, scores: F64, rng: random.Random) -> tuple[int, int]:
        """Position of the chosen candidate and how many it was drawn among."""
        ...


class BestPicker:
    """The lowest score; exact ties broken at random."""

    def pick(self, scores: F64, rng: random.Random) -> tuple[int, int]:
        ties = np.flatnonzero(scores == scores.min())
        if len(ties) == 1:
            return int(ties[0]), 1
        return int(ties[rng.randrange(len(ties))]), len(ties)


class MarginPicker:
    """Uniformly among candidates within ``abs_margin + rel_margin x best`` of the best."""

    def __init__(self, abs_margin: float = 0.0, rel_margin: float = 0.0) -> None:
        self.abs_margin = abs_margin
        self.rel_margin = rel_margin

    def pick(self, scores: F64, rng: random.Random) -> tuple[int, int]:
        if len(scores) == 1:  # one candidate (small fleets): no array work at all
            return 0, 1
        best = float(scores.min())
        bound = best + self.abs_margin + self.rel_margin * abs(best)
        near = np.flatnonzero(scores <= bound)
        if len(near) == 1:
            return int(near[0]), 1
        return int(near[rng.randrange(len(near))]), len(near)

    def pick_values(self, scores: Sequence[float], rng: random.Random) -> tuple[int, int]:
        """``pick`` over Python floats (the scalar decision path): the same draw."""
        if len(scores) == 1:
            return 0, 1
        best = min(scores)
        bound = best + self.abs_margin + self.rel_margin * abs(best)
        near = [position for position, score in enumerate(scores) if score <= bound]
        if len(near) == 1:
            return near[0], 1
        return near[rng.randrange(len(near))], len(near)
