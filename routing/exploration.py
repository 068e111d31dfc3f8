"""Exploration with a budget: now and then a real request re-measures a backend nobody chose.

A backend avoided after a bad minute gets no more samples, so what was learned about it can
only be undone by decay (slow on purpose). So a bounded share of real requests goes to such a
backend when it could plausibly be competitive: its evidence is older than ``after_s``, and
its *optimistic* TTFT, the prediction minus the part of its learned offset that its age no
longer vouches for (all of it after ``horizon_s``), is within ``within_ms`` or ``within_rel``
of the best score. Old evidence is optimistic under uncertainty, not pessimistic for ever.

The budget is a token bucket in decisions, not time: every committed decision earns ``share``
of a credit (up to ``burst``), an exploration spends one, so explorations are at most ``share``
of requests plus ``burst``. A request with a deadline explores only where even the pessimistic
prediction (the full learned offset) is within ``deadline_share`` of its deadline, so no
exploration can miss a deadline the router expected to meet. ``explain`` shows what the next
decision would explore without spending anything.

Re-measuring a backend that stays slow costs each time (in s7, a path 300 ms slower for good,
0.84% of requests paid it, and they were the TTFT p99). So explorations of one backend are counted
in a row while each finds its learned offset still at least half what the previous one found;
beyond ``backoff_after`` of them, each further one doubles that backend's horizon, up to
``backoff_max`` times ``horizon_s``: the doubt grows more slowly, so the re-measurements thin
out. An offset under half of the last one starts the count again, and so does a decision
that chooses the backend on its merits. The first ``backoff_after``
keep the base horizon, so a short degradation (15 s in scenarios 5 and 6) is found
recovered as quickly as without the back-off; a backend slow for minutes is found recovered
within about ``backoff_max`` horizons (decay of the offset itself shortens that).

A committed decision whose check found nothing worth exploring makes the next check wait
``recheck_s``: ages grow by seconds against ``after_s`` and scores move little from one request
to the next, while the check is a dozen array operations (~9 us) on every decision once the
credit is there and nothing fits, the steady state of a healthy fleet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from routing.fleet_view import F64, Rows
from routing.learned_columns import LearnedColumns
from routing.quick_init import quick_init
from routing.types import RequestProfile

_FEW = 16  # rows that could fit, up to which the check is Python floats (the rest: arrays)


@dataclass(frozen=True, slots=True)
class ExploreParams:
    share: float = 0.01  # of committed decisions (0: never explore)
    burst: float = 2.0  # credits that can pile up while nothing is worth exploring
    after_s: float = 5.0  # evidence this old makes a backend a candidate
    horizon_s: float = 10.0  # ...and this old is not believed at all in the optimistic bound
    within_ms: float = 50.0  # optimistic score within this of the best...
    within_rel: float = 0.5  # ...or this fraction of it
    deadline_share: float = 0.5  # a deadline must leave this much room beyond the prediction
    recheck_s: float = 0.0  # a committed check that found nothing is not repeated for this long
    backoff_after: int = 2  # explorations in a row, the offset held, before the horizon grows
    backoff_max: float = 8.0  # ...doubling each time, up to this many times ``horizon_s``


@dataclass(frozen=True, slots=True)
class _Streak:
    """A backend's explorations in a row, each finding its learned offset still there."""

    confirmed: int  # the first counts
    offset_ms: float  # the positive offset when it was last explored


@quick_init
@dataclass(frozen=True, slots=True)
class Exploration:
    position: int  # into the eligible rows
    row: int
    age_s: float
    doubted_ms: float  # offset not believed in the optimistic bound
    offset_ms: float  # the whole positive offset
    horizon_s: float  # the age at which all of it is doubted (grown by the back-off)

    def describe(self, backend: str) -> str:
        return (
            f"exploring {backend}: evidence {self.age_s:.1f} s old, "
            f"{self.doubted_ms:.0f} ms of its learned offset doubted "
            f"(all of it at {self.horizon_s:.0f} s)"
        )


class Explorer:
    def __init__(self, params: ExploreParams) -> None:
        self.params = params
        self.credit = 0.0  # earned by decisions: none explores before 1 / share of them
        self.explored = 0  # committed explorations
        self.decisions = 0  # committed decisions
        self.quiet_until = -float("inf")  # no check before then (the last one found nothing)
        self.checks = 0  # full checks run (decide and explain)
        self._found_nothing_at: float | None = None  # the latest check's, until committed
        self._streaks: dict[int, _Streak] = {}  # by row of ``_layout``
        self._layout: object = None  # the view the rows of ``_streaks`` belong to
        self._found: Exploration | None = None  # the latest check's candidate, until committed

    def horizon_s(self, row: int, offset_ms: float) -> float:
        """The age at which all of ``row``'s positive offset ``offset_ms`` is doubted."""
        p = self.params
        streak = self._streaks.get(row)
        if streak is None or offset_ms < 0.5 * streak.offset_ms:
            return p.horizon_s
        doublings = streak.confirmed - p.backoff_after
        if doublings <= 0:
            return p.horizon_s
        return p.horizon_s * min(2.0 ** min(doublings, 64), p.backoff_max)  # 2.0**1024 raises

    def _horizons(self, rows: Rows, everyone: bool, positive: F64) -> F64 | float:
        """``horizon_s`` of each of ``rows`` (a float when none has a streak)."""
        if not self._streaks:
            return self.params.horizon_s
        horizons = np.full(len(rows), self.params.horizon_s)
        for row in self._streaks:  # rows of this view (a new layout clears the streaks)
            for position in [row] if everyone else (rows == row).nonzero()[0].tolist():
                horizons[position] = self.horizon_s(row, float(positive[position]))
        return horizons

    def candidate(
        self,
        scores: F64,
        ttft_ms: F64,
        rows: Rows,
        learned: LearnedColumns,
        profile: RequestProfile,
        now: float,
    ) -> Exploration | None:
        """The eligible row worth re-measuring now, if the budget allows one."""
        p = self.params
        if not self._checks(len(rows), now, learned):
            return None
        # Only a row within the bound once its whole positive offset is doubted can fit (its
        # doubted part is at most that, in floats too), and in a spread fleet those are few:
        # a few array calls find them, Python floats check them (at c=1, where this runs on
        # most decisions, every numpy call costs 5-30 us). Near-equal fleets: every row.
        learned_at, bias = learned.learned_at, learned.bias_ms
        everyone = len(rows) == len(learned_at)
        best = float(scores.min())
        bound = best + max(p.within_ms, p.within_rel * abs(best))
        positive = np.maximum(bias if everyone else bias[rows], 0.0)
        near = (scores - positive <= bound).nonzero()[0]
        if len(near) <= _FEW:
            found = self._oldest_fit(
                near.tolist(), scores, ttft_ms if everyone else ttft_ms[rows], rows, learned,
                profile, now, best, bound,
            )  # fmt: skip
            return found
        age = now - (learned_at if everyone else learned_at[rows])  # NaN: never observed
        stale = age >= p.after_s
        horizons = self._horizons(rows, everyone, positive)
        doubted = positive.copy()
        doubted *= np.minimum(age / horizons, 1.0)
        fits = scores - doubted <= bound
        fits &= stale
        fits &= scores > best
        if profile.deadline_s is not None:
            room_ms = 1000.0 * profile.deadline_s * p.deadline_share
            fits &= (ttft_ms if everyone else ttft_ms[rows]) <= room_ms
        if not fits.any():
            return None
        # The oldest evidence first: it is the one least known.
        self._found_nothing_at = None
        positions = fits.nonzero()[0]
        position = int(positions[np.argmax(age[positions])])
        horizon = horizons if isinstance(horizons, float) else float(horizons[position])
        found = self._found = Exploration(
            position, int(rows[position]), float(age[position]), float(doubted[position]),
            float(positive[position]), horizon,
        )  # fmt: skip
        return found

    def candidate_rows(
        self,
        scores: Sequence[float],
        ttft_ms: Sequence[float],
        rows: Sequence[int],
        learned: LearnedColumns,
        profile: RequestProfile,
        now: float,
    ) -> Exploration | None:
        """``candidate`` for the scalar path: ``scores`` and ``ttft_ms`` aligned with ``rows``."""
        if not self._checks(len(rows), now, learned):
            return None
        p = self.params
        best = min(scores)
        bound = best + max(p.within_ms, p.within_rel * abs(best))
        return self._oldest_fit(
            range(len(rows)), scores, ttft_ms, rows, learned, profile, now, best, bound
        )

    def _oldest_fit(
        self,
        positions: Iterable[int],
        scores: Sequence[float] | F64,
        ttft_ms: Sequence[float] | F64,
        rows: Sequence[int] | Rows,
        learned: LearnedColumns,
        profile: RequestProfile,
        now: float,
        best: float,
        bound: float,
    ) -> Exploration | None:
        """Of ``positions`` (ascending, into ``rows``), the one with the oldest evidence that
        fits, with Python floats: the same operations in the same order as the array check."""
        p = self.params
        learned_at, bias = learned.learned_at, learned.bias_ms
        room_ms = (
            None if profile.deadline_s is None else 1000.0 * profile.deadline_s * p.deadline_share
        )
        found: Exploration | None = None
        for position in positions:
            row = int(rows[position])
            age = now - learned_at.item(row)
            if not age >= p.after_s:  # NaN (never observed): nothing to doubt
                continue
            score = float(scores[position])
            offset = max(bias.item(row), 0.0)
            horizon = self.horizon_s(row, offset)
            doubted = offset * min(age / horizon, 1.0)
            if score - doubted <= bound and score > best:
                if room_ms is not None and not ttft_ms[position] <= room_ms:
                    continue
                if found is None or age > found.age_s:  # the oldest evidence first
                    found = Exploration(position, row, age, doubted, offset, horizon)
        if found is not None:
            self._found_nothing_at = None
            self._found = found
        return found

    def _checks(self, eligible: int, now: float, learned: LearnedColumns) -> bool:
        """Whether a check runs now (counted; until committed, it found nothing)."""
        self._found_nothing_at = None
        self._found = None
        if learned.view is not self._layout:  # rows renumbered: streaks of other backends
            self._layout = learned.view
            self._streaks.clear()
        if self.credit < 1.0 or eligible < 2 or now < self.quiet_until:
            return False
        self.checks += 1
        self._found_nothing_at = now
        return True

    def committed(self, explored: bool, row: int) -> None:
        """One decision was committed, to ``row``; ``explored``: the exploration candidate."""
        p = self.params
        self.decisions += 1
        self.credit = min(self.credit + p.share, p.burst)
        if self._found_nothing_at is not None:  # explain never commits: it leaves this alone
            self.quiet_until = self._found_nothing_at + p.recheck_s
            self._found_nothing_at = None
        if explored:
            self.credit -= 1.0
            self.explored += 1
            if self._found is not None:
                self._confirm(self._found.row, self._found.offset_ms)
        elif self._streaks:  # chosen on its merits: no longer avoided, its streak is over
            self._streaks.pop(row, None)
        self._found = None

    def _confirm(self, row: int, offset_ms: float) -> None:
        """An exploration of ``row`` committed, its offset ``offset_ms`` when chosen."""
        streak = self._streaks.get(row)
        held = streak is not None and offset_ms >= 0.5 * streak.offset_ms
        self._streaks[row] = _Streak(streak.confirmed + 1 if held and streak else 1, offset_ms)
