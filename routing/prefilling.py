"""Prefill work this router sent that is probably still ahead of a new request, per backend.

A request sent after the engine's last scrape is on the engine but not in its metrics. Until
its first token, a new request queues behind its prefill; after that it only decodes, and it
is part of the batch (the step term), not of the queue. So each reservation taken after the
scrape carries the prefill work the router predicted for it (its uncached tokens at the
prefill rate, with the decode steps they span) and the time its first token should leave the
engine; it counts until then, or until a newer scrape shows it. Counting every reservation
since the scrape at a typical size instead charges a backend, one scrape interval long, for
prefills long done, and undercharges it for the long uncached prompts that really block it.

Time moves the sums without any event, so each row keeps the time its first counted
reservation is due; ``expire(now)`` recounts only the rows past that time.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from routing.fleet_view import F64, FleetView

_INF = float("inf")


class _Entry:
    __slots__ = ("due", "reserved_at", "work_ms")

    def __init__(self, reserved_at: float, due: float, work_ms: float) -> None:
        self.reserved_at, self.due, self.work_ms = reserved_at, due, work_ms


class Prefilling:
    def __init__(self) -> None:
        self._view: FleetView | None = None
        # backend -> reservations, oldest first (by name: they outlive a view's layout)
        self._entries: dict[str, deque[_Entry]] = {}
        self.work_ms: F64 = np.zeros(0)  # counted prefill work per row
        self._until: F64 = np.zeros(0)  # when the first counted reservation is due
        # Set by the predictor per row, for reservations it did not describe: how long one
        # stays ahead, and its work (a typical queued request's).
        self.window_s: F64 = np.zeros(0)
        self.typical_ms: F64 = np.zeros(0)

    def allocate(self, view: FleetView) -> None:
        """Columns for ``view`` (call ``recount_all`` next)."""
        size = len(view)
        if self._view is not view:
            self.window_s, self.typical_ms = np.full(size, _INF), np.zeros(size)
        self._view = view
        self.work_ms, self._until = np.zeros(size), np.full(size, _INF)

    def reserved(self, row: int, now: float) -> None:
        """A reservation at ``now`` on ``row``, taken after its scrape."""
        entry = _Entry(now, now + self.window_s.item(row), self.typical_ms.item(row))
        self._entries.setdefault(self._name(row), deque()).append(entry)
        self.work_ms[row] += entry.work_ms
        self._until[row] = min(self._until.item(row), entry.due)

    def describe(self, row: int, now: float, due: float, work_ms: float) -> None:
        """What the router predicted for the reservation it just took on ``row`` at ``now``."""
        entries = self._entries.get(self._name(row))
        if entries and entries[-1].reserved_at == now:
            entries[-1].due, entries[-1].work_ms = due, work_ms
            self.recount(row, now)

    def released(self, row: int, now: float) -> None:
        """A reservation on ``row`` ended (the oldest: releases carry no request id)."""
        entries = self._entries.get(self._name(row))
        if entries:
            entries.popleft()
            self.recount(row, now)

    def recount(self, row: int, now: float) -> None:
        """Drop what a newer scrape shows or what is due by ``now``; sum the rest."""
        view = self._view
        assert view is not None
        name = view.names[row]
        entries = self._entries.get(name)
        if not entries:
            self.work_ms[row], self._until[row] = 0.0, _INF
            return
        scraped = view.metrics_as_of.item(row)
        kept = [e for e in entries if e.reserved_at > scraped and e.due > now]
        if len(kept) < len(entries):
            entries.clear()
            entries.extend(kept)
        self.work_ms[row] = sum(e.work_ms for e in kept)
        self._until[row] = min((e.due for e in kept), default=_INF)
        if not kept:
            del self._entries[name]

    def recount_all(self, now: float) -> None:
        assert self._view is not None
        index = self._view.index
        for name in list(self._entries):
            row = index.get(name)
            if row is None:
                del self._entries[name]  # left the fleet
            else:
                self.recount(row, now)

    def _name(self, row: int) -> str:
        assert self._view is not None
        return self._view.names[row]

    def expire(self, now: float) -> list[int]:
        """Recount the rows where a reservation fell due by ``now``; returns them."""
        rows: list[int] = np.flatnonzero(self._until <= now).tolist()
        for row in rows:
            self.recount(row, now)
        return rows
