"""Turn scores into ranked ``Candidate`` values with the reason each won or lost.

Only the candidates a decision returns are built (``max_ranked``, a few), and only for them is
the prediction broken down into ages, spreads and a p90.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from routing.fleet_view import F64, FleetView, Rows
from routing.pipeline.lazy_candidate import LazyCandidate, RankContext
from routing.pipeline.pickers import MarginPicker
from routing.pipeline.scoring import Scores
from routing.types import Candidate, Decision, Rejection

_PARTITION_FROM = 256  # below this many candidates a full stable sort is as cheap


def rank(values: F64, chosen: int, limit: int | None) -> list[int]:
    """Positions in rank order: the chosen one first, then the rest by score (stable)."""
    size = len(values)
    if size == 1:  # one candidate (small fleets): nothing to sort
        return [chosen]
    if limit is None or size < _PARTITION_FROM or limit >= size:
        order: list[int] = np.argsort(values, kind="stable").tolist()
    else:
        order = _smallest(values, limit)
    if chosen in order:
        order.remove(chosen)
    order.insert(0, chosen)
    return order if limit is None else order[:limit]


def _smallest(values: F64, count: int) -> list[int]:
    """The first ``count`` positions of a stable argsort, without sorting everything."""
    threshold = np.partition(values, count - 1)[count - 1]
    if threshold != threshold:  # NaN among the smallest: let the full sort order them
        return list(np.argsort(values, kind="stable").tolist())
    near = np.flatnonzero(values <= threshold)
    ordered: list[int] = near[np.argsort(values[near], kind="stable")].tolist()
    return ordered[:count]


def pick_and_rank(
    picker: MarginPicker, values: F64, rng: random.Random, limit: int
) -> tuple[int, int, list[int]] | None:
    """``picker.pick`` and ``rank`` in one sort: the chosen position, how many it was drawn
    among and the rank order, the same as those two give (None: leave it to them, for a
    fleet where a partial sort pays or a NaN score).

    Those within the margin of the best are a prefix of the sorted order, so the draw needs
    no mask and no second pass over the scores (three numpy calls fewer a decision; at c=1
    each costs 5-30 us)."""
    size = len(values)
    if size < 2 or size >= _PARTITION_FROM:
        return None
    order: list[int] = np.argsort(values, kind="stable").tolist()
    if values.item(order[-1]) != values.item(order[-1]):  # NaN sorts last
        return None
    best = values.item(order[0])
    bound = best + picker.abs_margin + picker.rel_margin * abs(best)
    among = 1
    while among < size and values.item(order[among]) <= bound:
        among += 1
    chosen = order[0] if among == 1 else sorted(order[:among])[rng.randrange(among)]
    order.remove(chosen)
    order.insert(0, chosen)
    return chosen, among, order[:limit]


def rank_values(values: Sequence[float], chosen: int, limit: int) -> list[int]:
    """``rank`` over Python floats (the scalar decision path): the same order."""
    order = sorted(range(len(values)), key=values.__getitem__)  # stable, as argsort's
    order.remove(chosen)
    order.insert(0, chosen)
    return order[:limit]


def chosen_reason(basis: str, mode: str, among: int) -> str:
    why = (
        f"lowest {basis}"
        if among == 1
        else f"drawn among {among} within margin of the lowest {basis}"
    )
    return f"chosen: {why}" + (f" [{mode}]" if mode else "")


def _lost_reason(basis: str, mine: float, best: float) -> str:
    return f"{basis} {mine:.1f} vs {best:.1f} for the chosen one (+{mine - best:.1f})"


def _plain(
    view: FleetView, rows: Rows, order: list[int], scores: Scores, among: int
) -> tuple[Candidate, ...]:
    idx = np.asarray(order, dtype=np.intp)
    names = [view.names[r] for r in rows[idx].tolist()]
    values = scores.values[idx].tolist()
    return tuple(
        Candidate(
            backend=names[k],
            score=values[k],
            reason=chosen_reason(scores.basis, scores.mode, among)
            if k == 0
            else _lost_reason(scores.basis, values[k], values[0]),
        )
        for k in range(len(names))
    )


def build_candidates(
    view: FleetView, rows: Rows, order: list[int], scores: Scores, among: int
) -> tuple[Candidate, ...]:
    """Candidates for ``order`` (positions into ``rows``; the chosen one first)."""
    built = _build(view, rows, order, scores, among)
    return built if scores.annotate is None else scores.annotate(built, order)


def _build(
    view: FleetView, rows: Rows, order: list[int], scores: Scores, among: int
) -> tuple[Candidate, ...]:
    pred = scores.prediction
    if pred is None:
        return _plain(view, rows, order, scores, among)
    values, e2e, cached = scores.values, pred.e2e_ms, pred.cached
    picked = [rows.item(position) for position in order]
    inputs = [pred.capture(row) for row in picked]
    context = RankContext(
        scores.basis,
        values.item(order[0]),
        chosen_reason(scores.basis, scores.mode, among),
        inputs[0],
    )
    return tuple(
        LazyCandidate.build(
            view.names[row],
            values.item(position),
            captured,
            None if e2e is None else e2e.item(row),
            int(cached.get(row, 0)),
            context,
        )
        for row, position, captured in zip(picked, order, inputs, strict=True)
    )


def no_backend(policy: str, rejected: tuple[Rejection, ...], fleet_size: int) -> Decision:
    if fleet_size == 0:
        return Decision(policy, (), rejected, note="no backend: the fleet snapshot is empty")
    counts: dict[str, int] = {}
    for rejection in rejected:
        counts[rejection.filter] = counts.get(rejection.filter, 0) + 1
    summary = ", ".join(f"{name}: {n}" for name, n in counts.items())
    return Decision(policy, (), rejected, note=f"no backend: all {fleet_size} rejected ({summary})")
