"""Prefill work this router sent that is probably still ahead of a new request, per backend.

A request sent after the engine's last scrape is on the engine but not in its metrics. Until
its first token, a new request queues behind its prefill; after that it only decodes, and it
is part of the batch (the step term), not of the queue. So each reservation taken after the
scrape carries the prefill work the router predicted for it (its uncached tokens at the
prefill rate, with the decode steps they span) and the time its first token should leave the
engine; it counts until then, or until a newer scrape shows it. Counting every reservation
since the scrape at a typical size instead charges a backend, one scrape interval long, for
prefills long done, and undercharges it for the long uncached prompts that really block it.

Time moves the sums without any event, so a heap holds when each row's first counted
reservation is due; ``expire(now)`` recounts only the rows past it (one comparison when none).
"""

from __future__ import annotations

import heapq
from collections import deque

from routing.fleet_view import FleetView, empty_view

_INF = float("inf")
_AT, _DUE, _WORK = 0, 1, 2  # an entry: [reserved at, due, work ms] (mutable: ``describe``)


class Prefilling:
    """Per-row values are plain lists: they are read and written one row at a time."""

    def __init__(self) -> None:
        self._view: FleetView = empty_view()  # until ``allocate``: no rows
        self._names: tuple[str, ...] = ()
        # backend -> reservations, oldest first (by name: they outlive a view's layout)
        self._entries: dict[str, deque[list[float]]] = {}
        self.work_ms: list[float] = []  # counted prefill work per row
        self._until: list[float] = []  # when the row's first counted reservation is due
        self._dues: list[tuple[float, int]] = []  # heap of (due, row); stale ones recount
        # Set by the predictor per row, for reservations it did not describe: how long one
        # stays ahead, and its work (a typical queued request's).
        self.window_s: list[float] = []
        self.typical_ms: list[float] = []

    def allocate(self, view: FleetView) -> None:
        """Columns for ``view`` (call ``recount_all`` next)."""
        size = len(view)
        if self._view is not view:
            self.window_s, self.typical_ms = [_INF] * size, [0.0] * size
        self._view, self._names = view, view.names
        self.work_ms, self._until, self._dues = [0.0] * size, [_INF] * size, []

    def reserved(self, row: int, now: float) -> None:
        """A reservation at ``now`` on ``row``, taken after its scrape."""
        due, work = now + self.window_s[row], self.typical_ms[row]
        name = self._names[row]
        entries = self._entries.get(name)
        if entries is None:
            entries = self._entries[name] = deque()
        entries.append([now, due, work])
        self.work_ms[row] += work
        if due < self._until[row]:
            self._due(row, due)

    def describe(self, row: int, now: float, due: float, work_ms: float) -> None:
        """What the router predicted for the reservation it just took on ``row`` at ``now``."""
        entries = self._entries.get(self._names[row])
        if entries and entries[-1][_AT] == now:
            last = entries[-1]
            self.work_ms[row] += work_ms - last[_WORK]
            last[_DUE], last[_WORK] = due, work_ms
            # A later due can only leave ``_until`` early: expire() then recounts the row.
            if due < self._until[row]:
                self._due(row, due)

    def released(self, row: int, now: float) -> None:
        """A reservation on ``row`` ended (the oldest: releases carry no request id)."""
        name = self._names[row]
        entries = self._entries.get(name)
        if entries:
            gone = entries.popleft()  # every entry left in the deque is in the sum
            if entries:
                self.work_ms[row] -= gone[_WORK]
            else:
                del self._entries[name]
                self.work_ms[row], self._until[row] = 0.0, _INF

    def recount(self, row: int, now: float) -> None:
        """Drop what a newer scrape shows or what is due by ``now``; sum the rest."""
        view = self._view
        name = self._names[row]
        self._until[row] = _INF
        entries = self._entries.get(name)
        if not entries:
            self.work_ms[row] = 0.0
            return
        scraped = view.metrics_as_of.item(row)
        kept = [e for e in entries if e[_AT] > scraped and e[_DUE] > now]
        if len(kept) < len(entries):
            entries.clear()
            entries.extend(kept)
        self.work_ms[row] = sum(e[_WORK] for e in kept)
        if kept:
            self._due(row, min(e[_DUE] for e in kept))
        else:
            del self._entries[name]

    def recount_all(self, now: float) -> None:
        index = self._view.index
        for name in list(self._entries):
            row = index.get(name)
            if row is None:
                del self._entries[name]  # left the fleet
            else:
                self.recount(row, now)

    def _due(self, row: int, due: float) -> None:
        self._until[row] = due
        heapq.heappush(self._dues, (due, row))

    def expire(self, now: float) -> list[int]:
        """Recount the rows where a reservation fell due by ``now``; returns them."""
        dues = self._dues
        if not dues or dues[0][0] > now:
            return []
        rows: set[int] = set()
        while dues and dues[0][0] <= now:
            rows.add(heapq.heappop(dues)[1])
        for row in rows:
            self.recount(row, now)
        return sorted(rows)
