"""``predicted_ttft_p90``: the served backend's predicted p90 TTFT as a ``Server-Timing`` entry,
beside ``predicted_ttft`` and ``upstream_ttfb`` (what happened), so calibration (issue 14:
the share of actual TTFTs at or below the predicted p90) can be read from a response's
headers alone, by a client or a benchmark (``loadtests/bench_fleet_calibration.py``)."""

from __future__ import annotations

from gateway.timing import TimingEntry
from routing.types import Decision


def p90_entries(decision: Decision, backend: str) -> list[TimingEntry]:
    """The entry for ``backend``'s candidate in ``decision`` (none: not predicted)."""
    for candidate in decision.ranked:
        if candidate.backend == backend:
            p90 = candidate.predicted_ttft_p90_ms
            return [] if p90 is None else [TimingEntry("predicted_ttft_p90", p90)]
    return []
