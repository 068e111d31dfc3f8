"""Each backend's scrapes and probes on its own jittered schedule, as a gateway runs them.

The gateway starts one loop per backend and signal (``gateway/signals/tasks.run_periodically``):
the first run after a random delay of up to ``min(interval, 1 s)``, then every interval spread
by +- ``jitter``. So its scrapes never land together, and a queue one backend had a moment ago
is seen at a different time than another's. The simulator's default reads every backend at
once on its snapshot tick; a replay that must make the recorded decisions (docs/replay.md)
uses this schedule instead (``Signals.schedule_jitter`` > 0), and the snapshot is rebuilt at
each read, as the gateway's hub rebuilds it on the next request after a signal changed.

``Signals.signals_after_s``: no scrape and no probe before then (a gateway that just started,
routing on configuration alone: the loops start at that time).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from loadtests.sim.fleet import SimBackend
from loadtests.sim.scenario import Signals
from loadtests.sim.signals import SignalModel

FIRST_RUN_SPREAD_S = 1.0  # as gateway/signals/tasks.py: a fresh gateway has signals quickly
SCRAPE, PROBE = 0, 1


class SignalSchedule:
    """Reads are numbered ``ref = 2 * backend index + (SCRAPE | PROBE)``."""

    def __init__(self, signals: Signals, backends: Sequence[SimBackend], seed: int) -> None:
        self._signals = signals
        self._backends = backends
        self._rng = random.Random(f"{seed}/signal-schedule")
        self._intervals = (signals.scrape_interval_s, signals.probe_interval_s)

    @property
    def active(self) -> bool:
        return self._signals.schedule_jitter > 0

    def first(self) -> list[tuple[float, int]]:
        """(time, ref) of every loop's first read."""
        start = self._signals.signals_after_s
        return [
            (start + self._rng.uniform(0.0, min(self._intervals[kind], FIRST_RUN_SPREAD_S)),
             2 * backend.index + kind)
            for backend in self._backends
            for kind in (SCRAPE, PROBE)
        ]  # fmt: skip

    def fire(self, ref: int, now: float, model: SignalModel) -> float:
        """Read what ``ref`` names into ``model`` now and rebuild the snapshots; the time of
        that loop's next read."""
        backend, kind = self._backends[ref // 2], ref % 2
        if kind == SCRAPE:
            model.scrape_one(backend, now)
        else:
            model.probe_one(backend, now)
        model.rebuild(now)
        jitter = self._signals.schedule_jitter
        return now + self._intervals[kind] * (1.0 + self._rng.uniform(-jitter, jitter))
