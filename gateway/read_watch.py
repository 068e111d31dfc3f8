"""One timer per relayed stream for the inter-token timeout and the request's deadline.

Wrapping every upstream read in ``asyncio.timeout`` schedules and cancels a timer handle per
event (a heap push, a cancel, a context object). :class:`ReadWatch` instead keeps one handle
per stream and marks when the current read began; the handle fires at most once per
``idle_s`` of a healthy stream, sees the read that is still waiting (or none) and either
re-arms for that read's own bound or ends it. Only time spent *waiting for upstream bytes*
counts, as with the per-read timeout: a stream held up by a slow client is not "stalled". Nor
does time the loop was too busy to look (gateway/lag_timeout.py): a check that runs over
``LATE_S`` late gives the loop back its lag before it calls a read stalled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gateway.lag_timeout import forgiveness_bound_s, gives_back


class ReadWatch:
    """``expire(kind, message, status)`` ends the waiting read (``UpstreamExchange.abort``)."""

    def __init__(
        self,
        idle_s: float,
        deadline: float | None,
        expire: Callable[[str, str, int], None],
    ) -> None:
        self._idle_s = idle_s
        self._deadline = deadline  # perf_counter() time
        self._expire = expire
        self._loop = asyncio.get_running_loop()
        # perf_counter() when the waiting read began. A caller on the per-read path may set it
        # itself instead of calling reading() (one call less a read: gateway/push_phase.py),
        # as long as it calls reading() whenever ``parked``.
        self.since: float | None = None
        self._handle: asyncio.TimerHandle | None = None  # None: parked past the deadline
        self._due = 0.0  # perf_counter() when the handle is due
        # The read (its ``since``) the loop's lag was last given back to, and how much in all.
        self._forgiven: tuple[float | None, float] = (None, 0.0)
        self.parked = False  # no timer while the deadline passed between reads: reading() fires
        self._stopped = False
        self._arm(time.perf_counter())

    def reading(self) -> None:
        """A read of upstream bytes starts now."""
        self.since = now = time.perf_counter()
        if self.parked:  # the deadline passed between reads
            self._arm(now)

    def done(self) -> None:
        """The read returned."""
        self.since = None

    def stop(self) -> None:
        self._stopped = True
        self.parked = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        # ``expire`` is a method of the exchange that holds this watch: letting go of it breaks
        # the cycle, so a finished stream is freed by reference counting, not by a collection.
        self._expire = _expired

    def _arm(self, now: float) -> None:
        bound = (self.since if self.since is not None else now) + self._idle_s
        if self._deadline is not None:
            bound = min(bound, self._deadline)
        self.parked = False
        self._due = now + max(0.0, bound - now)
        self._handle = self._loop.call_later(self._due - now, self._check)

    def _check(self) -> None:
        now = time.perf_counter()
        past_deadline = self._deadline is not None and now >= self._deadline
        since = self.since
        if since is None:  # between reads: the next read is bounded from its own start
            if past_deadline:
                self._handle = None  # reading() fires it (a read begun now is already late)
                self.parked = not self._stopped
            else:
                self._arm(now)
            return
        if not past_deadline and now < since + self._idle_s:
            self._arm(now)
            return
        if not past_deadline and self._forgive(since, now):
            return
        self._handle = None
        self.parked = not self._stopped
        if past_deadline:
            self._expire("deadline_exceeded", "the request's total deadline passed mid-stream", 504)
        else:
            idle = f"{self._idle_s:.1f}s"
            self._expire("upstream_stalled", f"upstream sent nothing for {idle} mid-stream", 502)

    def _forgive(self, since: float, now: float) -> bool:
        """Whether this check ran late enough to give the loop back its lag (re-armed then)."""
        late = now - self._due
        read, forgiven = self._forgiven
        if read != since:
            forgiven = 0.0
        if not gives_back(late, forgiven, forgiveness_bound_s(self._idle_s)):
            return False
        self._forgiven = (since, forgiven + late)
        self._due = now + late
        self._handle = self._loop.call_later(late, self._check)
        return True


def _expired(kind: str, message: str, status: int) -> None:
    """A stopped watch's ``expire``: the stream it watched is over."""
