"""The background side of shared quotas: claim allowances from the state store's token buckets
for the buckets the request path asked to refill (:mod:`gateway.quota.allowance`).

One claim is one ``take_tokens`` round trip; up to ``_BATCH`` run at once. A bucket the store
found empty is not asked again before the store says it will have enough (between
``_MIN_RETRY_S`` and ``_MAX_RETRY_S``), however many requests it refuses meanwhile. With the
store away, one claim every ``_MAX_RETRY_S`` tells when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import time
from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter

from gateway.quota.allowance import Allowance, AllowanceLink
from gateway.state.records import TokenResult

_BATCH = 64
_MIN_RETRY_S = 0.01
_MAX_RETRY_S = 0.5


class TokenStore(Protocol):
    """``SharedStateSync.take_tokens``: None when the store cannot answer."""

    async def take_tokens(
        self, bucket: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenResult | None: ...


class Refiller:
    def __init__(
        self,
        link: AllowanceLink,
        store: TokenStore,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._link = link
        self._store = store
        self._clock = clock
        self._later: list[tuple[float, int, Allowance]] = []  # (not before, seq, allowance)
        self._seq = itertools.count()
        self._last: Allowance | None = None  # a bucket to ask, to learn the store is back
        self.in_flight = 0
        self.claims = Counter(
            "meridian_quota_claims",
            "Allowances claimed from the shared token buckets, by what the store answered "
            "(granted, partial: less than asked, refused: empty, unavailable: no answer)",
            ["result"],
            registry=registry,
        )

    def idle(self) -> bool:
        """Nothing queued, nothing being claimed (tests wait for it)."""
        return not self._link.wanted and self.in_flight == 0

    async def run(self) -> None:
        wake = self._link.wake
        while True:
            timeout = self._timeout()
            if not self._link.wanted:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout)
            wake.clear()
            await self.tick()

    def _timeout(self) -> float | None:
        if self._link.away:
            return _MAX_RETRY_S
        if self._later:
            return max(0.0, self._later[0][0] - self._clock())
        return None

    async def tick(self) -> None:
        """Claim for every bucket whose claim is due (the queue, then retries come due)."""
        now = self._clock()
        while self._later and self._later[0][0] <= now:
            allowance = heapq.heappop(self._later)[2]
            allowance.queued = False
            self._link.want(allowance)
        due: list[Allowance] = []
        while self._link.wanted and len(due) < _BATCH:
            allowance = self._link.wanted.popleft()
            if allowance.retry_at > now and not self._link.away:
                heapq.heappush(self._later, (allowance.retry_at, next(self._seq), allowance))
                continue
            allowance.queued = False
            if not allowance.dropped:
                due.append(allowance)
        if not due and self._link.away and self._last is not None:
            due.append(self._last)  # is the store back?
        if due:
            self.in_flight += len(due)
            try:
                await asyncio.gather(*(self._claim(allowance) for allowance in due))
            finally:
                self.in_flight -= len(due)

    async def _claim(self, allowance: Allowance) -> None:
        self._last = allowance
        if self._link.away:
            want = 1.0  # the smallest question that tells whether the store answers
        else:
            want = allowance.wanted()
            if want <= 0:
                return
        answer = await self._take(allowance, want)
        if answer is None:
            return
        if answer.allowed:
            self.claims.labels("granted").inc()
            allowance.granted(want, store_had_more=answer.tokens_left >= allowance.chunk)
            return
        partial = math.floor(answer.tokens_left)
        if partial >= 1:  # take what is there; the rest comes when the store has it
            second = await self._take(allowance, float(partial))
            if second is not None and second.allowed:
                self.claims.labels("partial").inc()
                allowance.granted(float(partial), store_had_more=False)
                return
        self.claims.labels("refused").inc()
        wait = min(_MAX_RETRY_S, max(_MIN_RETRY_S, answer.retry_after_s))
        allowance.refused(self._clock() + wait)
        self._link.want(allowance)  # queued for when it is due

    async def _take(self, allowance: Allowance, cost: float) -> TokenResult | None:
        answer = await self._store.take_tokens(
            allowance.name, allowance.rate, allowance.burst, cost
        )
        if answer is None:
            self.claims.labels("unavailable").inc()
            self._link.away = True
        else:
            self._link.away = False
        return answer
