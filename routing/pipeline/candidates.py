"""Turn scores into ranked ``Candidate`` values with the reason each won or lost."""

from __future__ import annotations

import numpy as np

from routing.fleet_view import F64, FleetView, Rows
from routing.pipeline.scoring import Scores
from routing.predictor import TERMS
from routing.types import Candidate, Decision, Rejection


def rank(values: F64, chosen: int, limit: int | None) -> list[int]:
    """Positions in rank order: the chosen one first, then the rest by score (stable)."""
    order: list[int] = np.argsort(values, kind="stable").tolist()
    order.remove(chosen)
    order.insert(0, chosen)
    return order if limit is None else order[:limit]


def _chosen_reason(scores: Scores, among: int) -> str:
    why = (
        f"lowest {scores.basis}"
        if among == 1
        else f"drawn among {among} within margin of the lowest {scores.basis}"
    )
    return f"chosen: {why}" + (f" [{scores.mode}]" if scores.mode else "")


def _lost_reason(basis: str, mine: float, best: float, worse_terms: str) -> str:
    text = f"{basis} {mine:.1f} vs {best:.1f} for the chosen one (+{mine - best:.1f})"
    return text + (": " + worse_terms if worse_terms else "")


def _worse_terms(terms: dict[str, list[float]], k: int) -> str:
    """The two terms that cost candidate ``k`` most against the chosen one (index 0)."""
    worse = sorted(((terms[t][k] - terms[t][0], t) for t in TERMS), reverse=True)
    return ", ".join(f"{name} +{delta:.1f}" for delta, name in worse[:2] if delta > 0.05)


def _plain(
    view: FleetView, rows: Rows, idx: Rows, scores: Scores, among: int
) -> tuple[Candidate, ...]:
    names = [view.names[r] for r in rows[idx].tolist()]
    values = scores.values[idx].tolist()
    return tuple(
        Candidate(
            backend=names[k],
            score=values[k],
            reason=_chosen_reason(scores, among)
            if k == 0
            else _lost_reason(scores.basis, values[k], values[0], ""),
        )
        for k in range(len(names))
    )


def build_candidates(
    view: FleetView, rows: Rows, order: list[int], scores: Scores, among: int
) -> tuple[Candidate, ...]:
    """Candidates for ``order`` (positions into ``rows``; the chosen one first)."""
    idx = np.asarray(order, dtype=np.intp)
    pred = scores.prediction
    if pred is None:
        return _plain(view, rows, idx, scores, among)
    names = [view.names[r] for r in rows[idx].tolist()]
    values = scores.values[idx].tolist()
    terms = {t: pred.terms_ms[t][idx].tolist() for t in TERMS}
    ages = {t: pred.age_s[t][idx].tolist() for t in TERMS}
    spreads = {t: pred.spread_ms[t][idx].tolist() for t in TERMS}
    ttft, p90 = pred.ttft_ms[idx].tolist(), pred.ttft_p90_ms[idx].tolist()
    cached = pred.cached_tokens[idx].tolist()
    e2e = None if pred.e2e_ms is None else pred.e2e_ms[idx].tolist()
    chosen_reason = _chosen_reason(scores, among)
    return tuple(
        Candidate(
            backend=names[k],
            score=values[k],
            predicted_ttft_ms=ttft[k],
            predicted_ttft_p90_ms=p90[k],
            terms_ms={t: terms[t][k] for t in TERMS},
            reason=chosen_reason
            if k == 0
            else _lost_reason(scores.basis, values[k], values[0], _worse_terms(terms, k)),
            predicted_e2e_ms=None if e2e is None else e2e[k],
            cached_tokens=int(cached[k]),
            term_age_s={t: ages[t][k] for t in TERMS},
            term_spread_ms={t: spreads[t][k] for t in TERMS},
        )
        for k in range(len(names))
    )


def no_backend(policy: str, rejected: tuple[Rejection, ...], fleet_size: int) -> Decision:
    if fleet_size == 0:
        return Decision(policy, (), rejected, note="no backend: the fleet snapshot is empty")
    counts: dict[str, int] = {}
    for rejection in rejected:
        counts[rejection.filter] = counts.get(rejection.filter, 0) + 1
    summary = ", ".join(f"{name}: {n}" for name, n in counts.items())
    return Decision(policy, (), rejected, note=f"no backend: all {fleet_size} rejected ({summary})")
