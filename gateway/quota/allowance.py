"""One quota bucket shared by every replica: its tokens live in the state store (a Lua bucket,
clock = the store's), and this replica spends a local *allowance* claimed from it in the
background (:mod:`gateway.quota.refill`), so the request path never awaits the store.

Bounds, with ``n`` replicas and an allowance of ``a = max(1, fraction x burst)`` tokens:

- A replica admits against what it was granted, and may overdraw that by at most ``a`` while
  the shared bucket last had tokens (a bucket this replica has not claimed for yet, or a refill
  still on its way); the overdraft is claimed first at the next refill. So over any window of
  ``T`` seconds the replicas admit at most ``burst + rate x T + n x a``: a tolerance of
  ``n x fraction`` over the limit (0.2 for two replicas at the default 0.1).
- What a replica holds unspent (at most ``a`` plus what the last claim brought) is held back
  from the others until spent: it delays, it is never lost twice.
- Store away (a claim gets no answer): every allowance turns into a plain per-replica bucket,
  starting full, as on a replica without a store — the quota *fails open* to per-replica limits
  (each admission counted in ``meridian_quota_fail_open_total``) until a claim succeeds again.
"""

from __future__ import annotations

import asyncio
from collections import deque

from gateway.quota.bucket import Bucket


class AllowanceLink:
    """What every allowance of one replica shares: the refill queue and whether the store is
    away. Synchronous; the refiller reads the queue and flips ``away``."""

    __slots__ = ("away", "fraction", "wake", "wanted")

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction
        self.away = False
        self.wanted: deque[Allowance] = deque()
        self.wake = asyncio.Event()  # binds to a loop only when the refiller waits

    def want(self, allowance: Allowance) -> None:
        if not allowance.queued:
            allowance.queued = True
            self.wanted.append(allowance)
            self.wake.set()


class Allowance:
    """The local share of one shared bucket; the same surface as :class:`Bucket` for
    :class:`gateway.quota.limiter.Quotas`."""

    __slots__ = (
        "_link",
        "burst",
        "chunk",
        "dropped",
        "level",
        "local",
        "name",
        "need",
        "queued",
        "rate",
        "retry_at",
        "shared_ok",
    )

    def __init__(self, name: str, rate: float, burst: float, link: AllowanceLink) -> None:
        self.name = name  # the store's bucket name
        self.rate = rate  # tokens per second
        self.burst = burst
        self.chunk = max(1.0, min(burst, burst * link.fraction))
        self.level = 0.0  # granted by the store and not spent yet; below zero: owed
        self.shared_ok = True  # the store had tokens at the last claim: overdraft allowed
        self.need = 0.0  # the largest cost refused for lack of allowance since the last claim
        self.queued = False
        self.retry_at = 0.0  # monotonic: no claim before (the store said it is empty)
        self.local: Bucket | None = None  # while the store is away: per-replica limits
        self.dropped = False  # evicted by the limiter (least recently used)
        self._link = link

    # -- request path ------------------------------------------------------------------

    def refill(self, now: float) -> None:
        if self._link.away:
            if self.local is None:
                self.local = Bucket.full(self.rate, self.burst, now)
            self.local.refill(now)
        elif self.local is not None:
            self.back()

    @property
    def tokens(self) -> float:
        if self.local is not None:
            return self.local.tokens
        return self.level + (self.chunk if self.shared_ok else 0.0)

    def take(self, cost: float, now: float) -> bool:
        if self.local is not None:
            return self.local.take(cost, now)
        if self.tokens < cost:
            return False
        self.level -= cost
        if self.level < self.chunk / 2:
            self._link.want(self)
        return True

    def debit(self, cost: float, now: float) -> None:
        if self.local is not None:
            self.local.debit(cost, now)
            return
        self.level -= cost
        self._link.want(self)

    def missed(self, cost: float) -> None:
        """A request needing ``cost`` was refused: claim enough for it at the next refill."""
        if self.local is None:
            self.need = max(self.need, cost)
            self._link.want(self)

    def wait_s(self, cost: float) -> float:
        missing = min(cost, self.burst) - self.tokens
        return max(0.0, missing / self.rate)

    def reset_s(self) -> float:
        return max(0.0, (self.burst - self.tokens) / self.rate)

    # -- refiller ----------------------------------------------------------------------

    def wanted(self) -> float:
        """Tokens to claim now: back up to one allowance (or the largest refused cost), the
        overdraft included; never more than the store's bucket can hold."""
        target = max(self.chunk, self.need)
        return min(self.burst, target - self.level)

    def granted(self, tokens: float, store_had_more: bool) -> None:
        if self.local is not None:
            self.back()
        self.level += tokens
        self.need = 0.0
        self.shared_ok = store_had_more

    def refused(self, retry_at: float) -> None:
        self.shared_ok = False
        self.retry_at = retry_at

    def back(self) -> None:
        """The store answers again: start afresh from it (what was spent meanwhile is the
        fail-open, not owed)."""
        self.local = None
        self.level = 0.0
        self.shared_ok = True
