"""The ``path_delay`` events active on each backend now, and the paths they make together.

A backend's requests pay the sum of its active events' ``extra_ms``; its probes pay those the
probes see, or the last active edge's own ``probe_rtt_ms`` (a probe answered in front of the
slow hop). Each start or end of an event sets the backend's paths again, moves its version (the
snapshot's rows follow) and re-reads its one-way times in the step ticks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loadtests.sim.fleet import SimBackend
from loadtests.sim.scenario import PathDelay, TimedEvent
from loadtests.sim.step_ticks import StepTicks


class PathDelays:
    def __init__(
        self, events: Sequence[TimedEvent], by_name: Mapping[str, SimBackend], ticks: StepTicks
    ) -> None:
        self._events = events
        self._by_name = by_name
        self._ticks = ticks
        self._active: dict[str, set[int]] = {}  # backend -> its active path_delay events

    def start(self, now: float, i: int) -> None:
        """Event ``i`` (a ``path_delay``) begins now."""
        name = self._event(i).backend
        self._active.setdefault(name, set()).add(i)
        self._repath(name)

    def end(self, now: float, i: int) -> None:
        """Event ``i`` ends now."""
        name = self._event(i).backend
        self._active[name].discard(i)
        self._repath(name)

    def _event(self, i: int) -> PathDelay:
        event = self._events[i]
        assert isinstance(event, PathDelay)
        return event

    def _repath(self, name: str) -> None:
        backend = self._by_name[name]
        active = [self._event(i) for i in sorted(self._active[name])]
        backend.path_extra_ms = sum(e.extra_ms for e in active)
        backend.probe_extra_ms = sum(e.extra_ms for e in active if e.probes_see)
        edges = [e.probe_rtt_ms for e in active if e.probe_rtt_ms is not None]
        backend.probe_rtt_ms = edges[-1] if edges else None
        backend.version += 1
        self._ticks.repath(backend.index)
