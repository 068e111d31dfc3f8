"""How a policy reacted to each ``path_delay`` event: seconds to leave, seconds to return.

A backend's *share* is the fraction of all routed requests it got. Before the event it had
its pre-event share (the 30 s before the event). The policy has *left* once a window of
requests (as many as would carry ``EXPECTED`` requests to the backend at its pre-event share)
starting there holds at most 10% of that share; it has *returned* once such a window, starting
after the path recovered, holds at least 50% of it. Windows count requests, not seconds, so a
rate does not change what a second means. While the path is slow, the share that still goes
there (explorations, or oscillation) is reported beside.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from loadtests.sim.results import F64, I64, PolicyRun
from loadtests.sim.scenario import PathDelay, Scenario

EXPECTED = 20.0  # requests the backend would get in one window at its pre-event share
PRE_S = 30.0
LEFT, RETURNED = 0.1, 0.5


@dataclass(frozen=True, slots=True)
class PathReaction:
    backend: str
    extra_ms: float
    probes_see: bool
    start_s: float
    end_s: float | None  # None: not within the run (the path stays slow)
    pre_share: float
    leave_s: float | None  # None: never left
    return_s: float | None  # None: never returned (or never left, or the path stays slow)
    degraded_share: float | None  # of pre_share, after leaving and before the recovery

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def line(self) -> str:
        def s(value: float | None) -> str:
            return "never" if value is None else f"{value:.1f} s"

        recovers = "for good" if self.end_s is None else f"{self.start_s:.0f}-{self.end_s:.0f} s"
        share = "-" if self.degraded_share is None else f"{100 * self.degraded_share:.1f}%"
        back = ""
        if self.end_s is not None and self.leave_s is not None:
            back = f", back in {s(self.return_s)}"
        return (
            f"{self.backend} +{self.extra_ms:.0f} ms {recovers} (probes "
            f"{'see it' if self.probes_see else 'stay fast'}): pre-event share "
            f"{100 * self.pre_share:.1f}%, left in {s(self.leave_s)}{back}, "
            f"share while slow {share} of before"
        )


def _first_window(hits: F64, at: F64, start: float, width: int, test: float, low: bool) -> int:
    """Index of the first request at or after ``start`` whose window passes the test."""
    cum = np.concatenate(([0.0], np.cumsum(hits)))
    first = int(np.searchsorted(at, start))
    last = len(at) - width
    if last < first:
        return -1
    counts = cum[first + width : last + width + 1] - cum[first : last + 1]
    passing = np.flatnonzero(counts <= test if low else counts >= test)
    return -1 if len(passing) == 0 else first + int(passing[0])


def react(event: PathDelay, run: PolicyRun, scenario: Scenario) -> PathReaction | None:
    results = run.results
    index = scenario.backend_names().index(event.backend)
    routed = results.backend >= 0
    order = np.argsort(results.arrived_at[routed], kind="stable")
    at: F64 = results.arrived_at[routed][order]
    chosen: I64 = results.backend[routed][order]
    hits = (chosen == index).astype(np.float64)
    before = (at >= event.start_s - PRE_S) & (at < event.start_s)
    if not before.any() or not hits[before].any():
        return None
    pre = float(hits[before].mean())
    width = max(1, math.ceil(EXPECTED / pre))
    ends = event.end_s if event.end_s < at[-1] else None
    k = _first_window(hits, at, event.start_s, width, LEFT * EXPECTED, low=True)
    leave = None if k < 0 or (ends is not None and at[k] >= ends) else float(at[k])
    back = None
    if ends is not None and leave is not None:
        j = _first_window(hits, at, ends, width, RETURNED * EXPECTED, low=False)
        back = None if j < 0 else float(at[j]) - ends
    degraded = None
    if leave is not None:
        slow = (at >= leave) & (at < (ends if ends is not None else math.inf))
        degraded = float(hits[slow].mean()) / pre if slow.any() else None
    return PathReaction(
        event.backend, event.extra_ms, event.probes_see, event.start_s, ends, pre,
        None if leave is None else leave - event.start_s, back, degraded,
    )  # fmt: skip


def reactions(run: PolicyRun, scenario: Scenario) -> list[PathReaction]:
    found = (react(e, run, scenario) for e in scenario.events if isinstance(e, PathDelay))
    return [r for r in found if r is not None]
