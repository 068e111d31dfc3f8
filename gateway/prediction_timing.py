"""What routing predicted for the served backend, as ``Server-Timing`` entries beside what
happened (``upstream_ttfb``): ``predicted_ttft`` with its terms, an expected ``cold_start``, and
``predicted_ttft_p90``, so calibration (issue 14:
the share of actual TTFTs at or below the predicted p90) can be read from a response's
headers alone, by a client or a benchmark (``loadtests/bench_fleet_calibration.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.timing import TimingEntry
from routing.types import Decision

if TYPE_CHECKING:
    from gateway.stream import OpenedStream


def prediction_entries(opened: OpenedStream, decision: Decision) -> list[TimingEntry]:
    """The served backend's predicted TTFT (terms in ``desc``), its cold start when one was
    expected, and its predicted p90."""
    return _ttft_entries(opened) + p90_entries(decision, opened.route.backend)


def p90_entries(decision: Decision, backend: str) -> list[TimingEntry]:
    """The entry for ``backend``'s candidate in ``decision`` (none: not predicted)."""
    for candidate in decision.ranked:
        if candidate.backend == backend:
            p90 = candidate.predicted_ttft_p90_ms
            return [] if p90 is None else [TimingEntry("predicted_ttft_p90", p90)]
    return []


def _ttft_entries(opened: OpenedStream) -> list[TimingEntry]:
    """What routing predicted for the chosen backend, beside what happened: ``predicted_ttft``
    with its terms in ``desc``, and ``cold_start`` on its own when one was expected."""
    predicted = opened.route.predicted_ttft_ms
    if predicted is None:
        return []
    terms = opened.predicted_terms_ms
    desc = " ".join([f"{name}={value:.1f}" for name, value in terms.items() if value])
    entries = [TimingEntry("predicted_ttft", predicted, desc or None)]
    cold = terms.get("cold_start", 0.0)
    if cold > 0:
        entries.append(TimingEntry("cold_start", cold, "predicted"))
    return entries
