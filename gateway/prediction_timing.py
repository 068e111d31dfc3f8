"""What routing predicted for the served backend, as ``Server-Timing`` entries beside what
happened (``upstream_ttfb``): ``predicted_ttft`` with its terms, an expected ``cold_start``, and
``predicted_ttft_p90``, so calibration (issue 14:
the share of actual TTFTs at or below the predicted p90) can be read from a response's
headers alone, by a client or a benchmark (``loadtests/bench_fleet_calibration.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gateway.objectives import timing_entries as objective_entries
from gateway.timing import TimingEntry
from routing.types import Candidate, Decision, RequestProfile

if TYPE_CHECKING:
    from gateway.opened_stream import OpenedStream


def prediction_entries(opened: OpenedStream, decision: Decision) -> list[TimingEntry]:
    """The served backend's predicted TTFT (terms in ``desc``), its cold start when one was
    expected, and its predicted p90."""
    route = opened.route
    return _predicted(decision, route.backend, route.predicted_ttft_ms, opened.predicted_terms_ms)


class PreparedEntries:
    """The entries the first byte out carries that the first token does not decide (what
    routing predicted for the first attempt's backend, the objective's), worked out while the
    request is upstream: each attempt schedules :meth:`prepare` (gateway/attempt.py), which
    runs once its request is out and the loop waits for the backend. Without it they were
    built between the first token in and the first byte out. Another winner (a retry, a
    hedge), or a first token faster than the loop's next turn, gets them built then, as
    before."""

    __slots__ = ("_decision", "_first", "_objectives", "_prediction", "_profile")

    def __init__(self, decision: Decision, profile: RequestProfile) -> None:
        self._decision, self._profile = decision, profile
        self._first: tuple[str, float | None, Mapping[str, float]] | None = None
        self._prediction: list[TimingEntry] | None = None
        self._objectives: list[TimingEntry] | None = None

    def prepare(self, candidate: Candidate) -> None:
        """``candidate``'s breakdown (its terms go into Server-Timing and learning, ~10-45 us
        to work out) for every attempt; the entries for the first."""
        terms = candidate.terms_ms
        if self._objectives is not None:
            return  # a retry or a hedge: its entries are built if it wins
        decision = self._decision
        self._objectives = objective_entries(decision, self._profile)
        backend, predicted = candidate.backend, candidate.predicted_ttft_ms
        self._first = (backend, predicted, terms)
        self._prediction = _predicted(decision, backend, predicted, terms)

    def prediction(self, opened: OpenedStream) -> list[TimingEntry]:
        """:func:`prediction_entries` of the served backend."""
        route = opened.route
        if self._prediction is not None and self._first == (
            route.backend,
            route.predicted_ttft_ms,
            opened.predicted_terms_ms,
        ):
            return self._prediction
        return prediction_entries(opened, self._decision)

    def objectives(self) -> list[TimingEntry]:
        """The objective's entries (the same whichever backend won)."""
        if self._objectives is not None:
            return self._objectives
        return objective_entries(self._decision, self._profile)


def p90_entries(decision: Decision, backend: str) -> list[TimingEntry]:
    """The entry for ``backend``'s candidate in ``decision`` (none: not predicted)."""
    for candidate in decision.ranked:
        if candidate.backend == backend:
            p90 = candidate.predicted_ttft_p90_ms
            return [] if p90 is None else [TimingEntry("predicted_ttft_p90", p90)]
    return []


def _predicted(
    decision: Decision, backend: str, predicted: float | None, terms: Mapping[str, float]
) -> list[TimingEntry]:
    """``backend``'s predicted TTFT entries and its p90: one formula for both callers."""
    return _ttft_entries(predicted, terms) + p90_entries(decision, backend)


def _ttft_entries(predicted: float | None, terms: Mapping[str, float]) -> list[TimingEntry]:
    """What routing predicted for the chosen backend, beside what happened: ``predicted_ttft``
    with its terms in ``desc``, and ``cold_start`` on its own when one was expected."""
    if predicted is None:
        return []
    desc = " ".join([f"{name}={value:.1f}" for name, value in terms.items() if value])
    entries = [TimingEntry("predicted_ttft", predicted, desc or None)]
    cold = terms.get("cold_start", 0.0)
    if cold > 0:
        entries.append(TimingEntry("cold_start", cold, "predicted"))
    return entries
