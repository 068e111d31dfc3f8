"""Early rejection: is a request's TTFT deadline out of reach of every ranked candidate?

A request whose first token cannot arrive in time is better refused at once (the client retries
elsewhere; the backend is spared a doomed prefill) than sent. It is *unmeetable* when even the
best ranked candidate's predicted TTFT at ``quantile`` exceeds the time left:

- at ``quantile`` 0.9, the candidate's predicted p90 (which never falls below the backend's
  learned p90 of actual/predicted);
- at any other ``quantile`` q, predicted TTFT + z_q x the combined spread of its terms.

``retry_after_s`` is the predicted queue drain: the time until the best candidate's queue term
has shrunk enough for its prediction at the quantile to fit (queued work drains at one
millisecond per millisecond when nothing joins it; the quantile's margin over the point
prediction is taken to shrink in proportion), capped at the whole queue term, never under a
second. When even an empty queue would not fit (``queue_helps`` is False), waiting cannot help:
the deadline is below what the round trip, prefill and cold start alone take.

Candidates without a prediction (baseline policies) are never grounds for a refusal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from routing.types import Candidate, Decision

P90 = 0.9


@dataclass(frozen=True, slots=True)
class Unmeetable:
    backend: str  # the best ranked candidate
    predicted_ms: float  # its predicted TTFT at the quantile
    budget_ms: float  # time left for the first token
    queue_ms: float  # its predicted queue wait
    retry_after_s: float
    queue_helps: bool  # the deadline would be met once the queue drained by the excess


def ttft_at(candidate: Candidate, quantile: float) -> float | None:
    """``candidate``'s predicted TTFT at ``quantile`` (None: the policy predicts none)."""
    ttft = candidate.predicted_ttft_ms
    if ttft is None:
        return None
    if quantile == P90:
        return candidate.predicted_ttft_p90_ms
    spread = math.sqrt(sum(s * s for s in candidate.term_spread_ms.values()))
    return max(ttft + NormalDist().inv_cdf(quantile) * spread, 0.0)


def unmeetable(decision: Decision, budget_ms: float, quantile: float = P90) -> Unmeetable | None:
    """Why no ranked candidate can meet ``budget_ms`` at ``quantile``; None if one can (or
    none predicts)."""
    best: tuple[float, Candidate] | None = None
    for candidate in decision.ranked:
        predicted = ttft_at(candidate, quantile)
        if predicted is None:
            return None
        if best is None or predicted < best[0]:
            best = (predicted, candidate)
    if best is None or best[0] <= budget_ms:
        return None
    predicted, candidate = best
    queue_ms = candidate.terms_ms.get("queue", 0.0)
    ttft = candidate.predicted_ttft_ms or 0.0
    # The quantile's distance from the point prediction shrinks with it as the queue drains
    # (spreads are proportional to the terms), so drain until the scaled point fits.
    scale = predicted / ttft if ttft > 0 else 1.0
    needed_ms = ttft - budget_ms / scale
    return Unmeetable(
        candidate.backend,
        predicted,
        budget_ms,
        queue_ms,
        retry_after_s=max(min(needed_ms, queue_ms) / 1000.0, 1.0),
        queue_helps=needed_ms <= queue_ms,
    )
