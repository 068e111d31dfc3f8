"""Requests still waiting for their first token: evidence no sample can give yet.

Routing learns a backend's TTFT when a first token arrives. A backend that stalls (an engine
wedged behind a long prefill, a path that lost its route, a process that accepts and never
answers) sends none, so nothing is learned until the first-token timeout fails the request,
and every decision meanwhile still sees the old, fast prediction. In the simulator a path
20 s slower took 126 requests in its first 20 s (a third of the traffic), least-loaded 57.

So a router counts, per backend, the requests it sent there that have had no first token, and
since when the backend last showed life while some waited (the first of them was sent, or a
first token came). A first token is owed within the longest due time (``factor`` x predicted
TTFT + ``after_ms``) of any request sent since the count was last zero; a backend silent
longer than that is ``overdue``: it is at least that much slower now than predicted, and its
score carries the overdue milliseconds until a first token comes. The longest, not the
latest: requests sent to a silent backend do not excuse it, and any of them may be the one
still waiting after a first token. (So a backend never idle keeps the longest due time it
has seen: a weaker check there, never a false one.)

Counts, not request ids: the router's outcomes name a backend, not a request (as the in-flight
ledger, FIFO is as good as any). A first token from a backend ends one wait and shows it alive;
a request that ends without one (a failure, a release) ends one wait and shows nothing. A
count never goes below zero, so a missed or doubled event costs at most one request's evidence.

The check at every decision is one comparison while nothing is late: against a lower bound of
the earliest time any backend's first token is owed, recomputed (one pass over the waits)
only once that time has come.
"""

from __future__ import annotations

from dataclasses import dataclass

_INF = float("inf")


@dataclass(frozen=True, slots=True)
class OverdueParams:
    factor: float = 3.0  # a first token later than this x its predicted TTFT...
    after_ms: float = 100.0  # ...plus this is overdue (0 factor and inf after: never)
    # Waits this long past due are forgotten: the gateway's first-token timeout (60 s by
    # default) has failed every such request by then, so a count still open is a lost event,
    # and a lost event must not exile a backend for good.
    forget_s: float = 120.0


class _Wait:
    """One backend's waiting requests."""

    __slots__ = ("count", "due_ms", "since")

    def __init__(self) -> None:
        self.count = 0  # requests sent and not yet answered
        self.since = 0.0  # the latest sign of life while some wait (s)
        self.due_ms = 0.0  # the longest due time of any sent since the count was last 0

    def owed_at(self) -> float:
        return self.since + self.due_ms / 1000.0


class AwaitingFirstToken:
    def __init__(self, params: OverdueParams | None = None) -> None:
        self.params = params or OverdueParams()
        self._waits: dict[str, _Wait] = {}  # kept at count 0 too: a backend is sent to again
        self._next_owed = _INF  # no first token is owed before then (a lower bound)

    def sent(self, backend: str, now: float, predicted_ttft_ms: float) -> None:
        """A request was sent to ``backend`` at ``now``, its TTFT predicted as given."""
        p = self.params
        due_ms = p.factor * max(predicted_ttft_ms, 0.0) + p.after_ms
        if due_ms == _INF:
            return
        wait = self._waits.get(backend)
        if wait is None:
            wait = self._waits[backend] = _Wait()
        wait.count += 1
        if wait.count == 1:
            wait.since, wait.due_ms = now, due_ms
        elif due_ms > wait.due_ms:
            # A duration, not a time: a request sent later does not excuse an older one's
            # wait (the next first token is owed since ``since`` all the same), but any of
            # them may be the one still waiting after an answer, so the longest counts.
            wait.due_ms = due_ms
        owed_at = wait.owed_at()
        if owed_at < self._next_owed:
            self._next_owed = owed_at

    def answered(self, backend: str, at: float) -> None:
        """A first token came from ``backend`` at ``at``: one wait ended, and it is alive.
        (The rest are owed the same time after this as they were after ``since``: later, so
        the lower bound ``_next_owed`` holds.)"""
        wait = self._waits.get(backend)
        if wait is not None and wait.count > 0:
            wait.count -= 1
            if at > wait.since:
                wait.since = at

    def dropped(self, backend: str) -> None:
        """A request to ``backend`` ended without a first token: one wait fewer."""
        wait = self._waits.get(backend)
        if wait is not None and wait.count > 0:
            wait.count -= 1

    def overdue(self, now: float) -> dict[str, float]:
        """Backends whose waiting requests are all past due at ``now``: ms past it."""
        if now < self._next_owed:
            return {}
        late: dict[str, float] = {}
        next_owed, forget_s = _INF, self.params.forget_s
        for backend, wait in self._waits.items():
            if wait.count > 0:
                owed_at = wait.owed_at()
                if owed_at + forget_s < now:
                    wait.count = 0
                elif owed_at <= now:
                    late[backend] = (now - owed_at) * 1000.0
                elif owed_at < next_owed:
                    next_owed = owed_at
        self._next_owed = next_owed  # late ones stay late: checked again at every decision
        if late:
            self._next_owed = now
        return late

    def waiting(self, backend: str) -> int:
        wait = self._waits.get(backend)
        return 0 if wait is None else wait.count
