"""Optimistic in-flight accounting: decisions this router took that signals cannot show yet.

Many gateways acting on the same stale snapshot all pick the same "best" backend (herding).
Counting each decision as in flight from the moment it is taken, until the request's outcome
is observed or released, lets the very next decision see the load this one adds.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Iterator

_FINISHED_KEPT = 256  # per backend: more than finish between two scrapes of any engine


class InFlightLedger:
    def __init__(self, ttl_s: float = 300.0) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0")
        self.ttl_s = ttl_s
        self._opened: dict[str, list[float]] = {}  # backend -> reservation times, ascending
        # backend -> (reserved at, released at) of the latest releases, in release order
        self._finished: dict[str, deque[tuple[float, float]]] = {}
        self._warming_until: dict[str, float] = {}
        self.warmed_at: dict[str, float] = {}  # backend -> our latest warm-up (routing.prewarm)

    def reserve(self, backend: str, now: float) -> None:
        times = self._opened.setdefault(backend, [])
        if times and now < times[-1]:
            times.insert(bisect_right(times, now), now)  # out-of-order clocks stay sorted
        else:
            times.append(now)

    def release(self, backend: str, now: float | None = None) -> None:
        """Close the oldest reservation on ``backend`` (FIFO is as good as any: no request ids).

        With ``now``, the release is remembered: an engine scrape taken before it still counts
        that request (``finished_after``)."""
        times = self._opened.get(backend)
        if times:
            reserved_at = times.pop(0)
            if not times:
                del self._opened[backend]
            if now is not None:
                finished = self._finished.get(backend)
                if finished is None:
                    finished = self._finished[backend] = deque(maxlen=_FINISHED_KEPT)
                finished.append((reserved_at, now))

    def finished_after(self, backend: str, since: float) -> int:
        """Requests reserved by ``since`` and released after it: a signal measured at ``since``
        still shows them running or waiting, though they are gone."""
        finished = self._finished.get(backend)
        if not finished:
            return 0
        while finished and finished[0][1] <= since:
            finished.popleft()  # released before the signal: it never saw them again
        return sum(1 for reserved_at, _ in finished if reserved_at <= since)

    def open_count(self, backend: str, now: float) -> int:
        self._expire(backend, now)
        return len(self._opened.get(backend, ()))

    def opened_after(self, backend: str, since: float, now: float) -> int:
        """Open reservations taken after ``since``: load a signal measured then cannot show."""
        self._expire(backend, now)
        times = self._opened.get(backend)
        return len(times) - bisect_right(times, since) if times else 0

    def recently_finished(self) -> list[str]:
        """Backends with remembered releases (see ``finished_after``)."""
        return list(self._finished)

    def oldest(self, backend: str) -> float | None:
        times = self._opened.get(backend)
        return times[0] if times else None

    def oldest_overall(self) -> float | None:
        """The oldest open reservation on any backend (expired ones included until expired)."""
        return min((times[0] for times in self._opened.values()), default=None)

    def last_reserved_at(self, backend: str) -> float | None:
        times = self._opened.get(backend)
        return times[-1] if times else None

    def busy(self, now: float) -> Iterator[str]:
        """Backends with open reservations (a few, usually; callers loop over these only)."""
        for backend in list(self._opened):
            self._expire(backend, now)
        return iter(list(self._opened))

    def mark_warming(self, backend: str, until: float) -> None:
        """A request was sent to a cold backend: later ones wait for the rest of that start."""
        self._warming_until[backend] = max(until, self._warming_until.get(backend, until))

    def warmed(self, backend: str, now: float) -> None:
        """A one-token warm-up request was sent to ``backend`` (activity: it resets idling)."""
        self.warmed_at[backend] = max(now, self.warmed_at.get(backend, now))

    def warming(self, now: float) -> dict[str, float]:
        """Remaining cold-start time (ms) per backend still warming up after our requests."""
        done = [backend for backend, until in self._warming_until.items() if until <= now]
        for backend in done:
            del self._warming_until[backend]
        return {backend: (until - now) * 1000.0 for backend, until in self._warming_until.items()}

    def _expire(self, backend: str, now: float) -> None:
        times = self._opened.get(backend)
        if times and times[0] < now - self.ttl_s:
            del times[: bisect_right(times, now - self.ttl_s)]
            if not times:
                del self._opened[backend]
