"""Walking a routing decision's ranked candidates until one produces a first token.

:class:`CandidateWalk` hands out the next candidate to try, enforcing the limits that bound a
request's upstream attempts: the attempt count, the retry budget (every attempt after the first
— retry or hedge — spends a token), and each backend's ``Retry-After``. Each candidate it
hands out comes with its router :class:`~routing.reservation.Reservation`: the first choice's
is the one ``decide`` took (released here if that candidate is skipped, or by
:meth:`CandidateWalk.abandon` if the walk never reaches it); any other is ``reserve``d as it
is handed out. The attempt holds it from then on.

:func:`walk_in_turn` tries one candidate at a time. :func:`walk_hedged` starts the next
candidate too when the running ones have produced no first token by the hedge delay; the first
to produce one wins and every other attempt is cancelled at once (its upstream connection is
closed, which is how the backend learns to stop).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.attempt import AttemptContext, AttemptFailure, discard, run_attempt
from gateway.config import HedgingConfig
from gateway.doors.upstream import serves
from gateway.hedging import ObservedTtft, hedge_delay_s
from gateway.lifecycle.states import Event
from gateway.opened_stream import OpenedStream
from gateway.retry_budget import RetryAfterTable
from gateway.timing import TimingEntry
from routing.reservation import Reservation, reserve
from routing.types import Candidate, Decision, RequestProfile


def _ignore(event: Event) -> None:
    return None


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    backend: str
    started_at: float  # perf_counter()
    hedge: bool


@dataclass(slots=True)
class CandidateWalk:
    ctx: AttemptContext
    decision: Decision
    profile: RequestProfile  # what was routed (the placement policy applied)
    first: Reservation | None  # decide()'s count on the first choice, until handed out
    max_attempts: int
    retry_after: RetryAfterTable
    records: list[AttemptRecord] = field(default_factory=list)
    outcomes: dict[int, str] = field(default_factory=dict)  # attempt number -> how it ended
    failures: list[AttemptFailure] = field(default_factory=list)
    hedges: int = 0
    budget_denied: bool = False
    skipped_wait_s: float | None = None  # shortest Retry-After wait among skipped candidates
    events: Callable[[Event], None] = field(default=_ignore)  # the request's lifecycle
    _index: int = 0

    @property
    def launched(self) -> int:
        return len(self.records)

    def next(self, hedge: bool = False) -> tuple[Candidate, int, Reservation] | None:
        """The next candidate to try, its attempt number and its reservation (the caller's to
        hold from now), or None when the walk is over."""
        ranked = self.decision.ranked
        now = time.monotonic()
        while self.launched < self.max_attempts and self._index < len(ranked):
            candidate = ranked[self._index]
            self._index += 1
            if not serves(self.ctx.inbound, self.ctx.state, candidate.backend):
                self.abandon()  # decide() had counted the first choice
                continue
            wait = self.retry_after.wait_s(candidate.backend, now)
            if wait > 0:
                self.abandon()
                self.skipped_wait_s = min(wait, self.skipped_wait_s or wait)
                continue
            if self.records and not self.ctx.state.budget.try_spend():
                self.budget_denied = True
                self._index -= 1  # not tried: a later attempt may still get a token
                return None
            held, self.first = self.first, None
            if held is None:
                held = reserve(self.ctx.state.router, candidate.backend, now)
            self.records.append(AttemptRecord(candidate.backend, time.perf_counter(), hedge))
            self.hedges += hedge
            self.events(Event.ATTEMPT_STARTED)
            return candidate, self.launched, held
        return None

    def abandon(self) -> None:
        """Give decide()'s count on the first choice back unless an attempt took it."""
        if self.first is not None:
            self.first.release()
            self.first = None

    def failed(self, attempt: int, failure: AttemptFailure) -> None:
        self.events(Event.ATTEMPT_FAILED)
        self.failures.append(failure)
        self.outcomes[attempt] = failure.kind if failure.status is None else str(failure.status)
        if failure.retry_after_s is not None and self.ctx.state.config.retry.honour_retry_after:
            self.retry_after.note(failure.backend, failure.retry_after_s, time.monotonic())

    def timing_entries(self, winner: int, ended_at: float) -> list[TimingEntry]:
        """One ``attemptN`` Server-Timing entry per attempt, when there was more than one."""
        if self.launched < 2:
            return []
        entries = []
        for number, record in enumerate(self.records, start=1):
            outcome = "ok" if number == winner else self.outcomes.get(number, "cancelled")
            kind = "hedge" if record.hedge else "try"
            dur = (ended_at - record.started_at) * 1000.0 if number == winner else None
            desc = f"{record.backend} {kind} {outcome}"
            entries.append(TimingEntry(f"attempt{number}", dur, desc))
        return entries


async def walk_in_turn(walk: CandidateWalk) -> tuple[OpenedStream, int] | None:
    while (step := walk.next()) is not None:
        candidate, number, held = step
        result = await run_attempt(walk.ctx, candidate, number, held)
        if isinstance(result, OpenedStream):
            return result, number
        walk.failed(number, result)
    return None


async def walk_hedged(
    walk: CandidateWalk, hedging: HedgingConfig, observed: ObservedTtft
) -> tuple[OpenedStream, int] | None:
    loop = asyncio.get_running_loop()
    running: dict[asyncio.Task[OpenedStream | AttemptFailure], int] = {}
    delay_s = 0.0
    last_launch = 0.0

    def launch(hedge: bool) -> Candidate | None:
        nonlocal last_launch
        step = walk.next(hedge)
        if step is None:
            return None
        candidate, number, held = step
        running[loop.create_task(run_attempt(walk.ctx, candidate, number, held))] = number
        last_launch = loop.time()
        return candidate

    first = launch(False)
    if first is None:
        return None
    delay_s = hedge_delay_s(hedging, first, observed)
    hedging_open = True
    try:
        while running:
            may_hedge = hedging_open and len(running) <= hedging.max_hedges
            timeout = max(0.0, last_launch + delay_s - loop.time()) if may_hedge else None
            done, _ = await asyncio.wait(
                running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                hedging_open = launch(True) is not None
                continue
            for task in done:
                number = running.pop(task)
                result = task.result()  # ApiError (the request is bad) ends the walk
                if isinstance(result, OpenedStream):
                    return result, number
                walk.failed(number, result)
            if not running:
                launch(False)
        return None
    finally:
        await _cancel_losers(running)


async def _cancel_losers(running: dict[asyncio.Task[OpenedStream | AttemptFailure], int]) -> None:
    for task in running:
        task.cancel()
    results = await asyncio.gather(*running, return_exceptions=True)
    for result in results:
        if isinstance(result, OpenedStream):
            discard(result)
