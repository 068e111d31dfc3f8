"""The in-memory state store: the zero-setup default.

It keeps the same semantics as the Redis store (TTLs, bounds, leases, token buckets, events),
so one process can run several ``SharedStateSync`` replicas against it, and so the store tests
run unchanged against both implementations.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from gateway.state.prefix_bounds import merge_newer, trim
from gateway.state.records import Ejection, SharedPull, SignalRecord, TokenResult, WriteBatch
from gateway.state.store import Retention, StoreSummary

_EVENT_QUEUE = 1024  # a subscriber this far behind is dropped (its reader pulls everything)


@dataclass(slots=True)
class _Lease:
    holder: str
    expires_at: float


# Refilled buckets are dropped when a new one would pass this many (the workers of one host
# share quota buckets here: one per key and tenant and dimension).
_BUCKETS_BEFORE_SWEEP = 10_000
_EXPIRE_EVERY_S = 1.0


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float
    full_at: float = 0.0  # wall s when it has refilled: as good as absent (Redis: PEXPIRE)


class MemoryStore:
    def __init__(
        self, retention: Retention | None = None, wall: Callable[[], float] = time.time
    ) -> None:
        self._retention = retention or Retention()
        self._wall = wall
        self._in_flight: dict[str, tuple[dict[str, int], float]] = {}  # replica -> (counts, exp)
        self._prefix: dict[str, dict[int, float]] = {}
        self._signals: dict[str, SignalRecord] = {}
        self._ejections: dict[str, Ejection] = {}
        self._leases: dict[str, _Lease] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._sweep_buckets_at = _BUCKETS_BEFORE_SWEEP
        self._expired_at = float("-inf")  # wall time of the last pass over leases and buckets
        self._subscribers: set[asyncio.Queue[WriteBatch]] = set()
        self._fell_behind: set[asyncio.Queue[WriteBatch]] = set()  # their events() ends

    @property
    def kind(self) -> str:
        return "memory"

    @property
    def events_lossless(self) -> bool:
        return True

    async def ping(self) -> None:
        return None

    async def push(self, batch: WriteBatch) -> None:
        now = self._wall()
        keep = self._retention
        if batch.in_flight is not None:
            self._in_flight[batch.replica] = (dict(batch.in_flight), now + keep.in_flight_ttl_s)
        for backend, blocks in batch.prefix.items():
            index = self._prefix.setdefault(backend, {})
            merge_newer(index, blocks)
            trim(index, now - keep.prefix_ttl_s, keep.prefix_blocks_per_backend)
        self._signals.update(batch.signals)
        self._ejections.update(batch.ejections)
        for queue in list(self._subscribers):
            try:
                queue.put_nowait(batch)
            except asyncio.QueueFull:  # never lose a batch silently: end that subscription
                self._subscribers.discard(queue)
                self._fell_behind.add(queue)

    def _expire(self, now: float) -> None:
        """Free what has outlived its TTL (what Redis's key expiry and trims free there): a
        backend no longer served, a lease not renewed, a bucket refilled, cost nothing here.
        Runs on every pull: the readers' periodic refresh, never a request."""
        keep = self._retention
        for backend, blocks in list(self._prefix.items()):
            trim(blocks, now - keep.prefix_ttl_s, keep.prefix_blocks_per_backend)
            if not blocks:
                del self._prefix[backend]
        for records, ttl_s in ((self._signals, keep.signal_ttl_s),
                               (self._ejections, keep.ejection_ttl_s)):  # fmt: skip
            for backend in [b for b, r in records.items() if now - r.at > ttl_s]:
                del records[backend]
        wall = self._wall()  # leases and buckets are timed by this store's clock
        if wall - self._expired_at < _EXPIRE_EVERY_S:
            return  # N workers pull every refresh: one pass over the buckets a second is plenty
        self._expired_at = wall
        for name in [n for n, lease in self._leases.items() if lease.expires_at <= wall]:
            del self._leases[name]
        for name in [n for n, bucket in self._buckets.items() if bucket.full_at <= wall]:
            del self._buckets[name]

    def held(self) -> dict[str, int]:
        """Entries kept now, per structure (docs/memory.md; tests check they return to 0)."""
        return {
            "in_flight_replicas": len(self._in_flight),
            "prefix_backends": len(self._prefix),
            "prefix_blocks": sum(len(blocks) for blocks in self._prefix.values()),
            "signals": len(self._signals),
            "ejections": len(self._ejections),
            "leases": len(self._leases),
            "token_buckets": len(self._buckets),
        }

    async def pull(self, since: float, now: float) -> SharedPull:
        keep = self._retention
        self._in_flight = {r: v for r, v in self._in_flight.items() if v[1] > now}
        self._expire(now)
        oldest = max(since, now - keep.prefix_ttl_s)
        return SharedPull(
            in_flight={r: dict(counts) for r, (counts, _) in self._in_flight.items()},
            prefix={}  # nothing was seen after now: no pass over every block
            if since > now
            else {
                backend: {h: t for h, t in blocks.items() if t >= oldest}
                for backend, blocks in self._prefix.items()
            },
            signals={b: s for b, s in self._signals.items() if now - s.at <= keep.signal_ttl_s},
            ejections={
                b: e for b, e in self._ejections.items() if now - e.at <= keep.ejection_ttl_s
            },
        )

    async def events(self) -> AsyncIterator[WriteBatch | None]:
        queue: asyncio.Queue[WriteBatch] = asyncio.Queue(_EVENT_QUEUE)
        self._subscribers.add(queue)
        try:
            yield None  # subscribed
            while queue not in self._fell_behind:
                yield await queue.get()
        finally:
            self._subscribers.discard(queue)
            self._fell_behind.discard(queue)

    async def forget_replica(self, replica: str) -> None:
        self._in_flight.pop(replica, None)

    async def try_lease(self, name: str, holder: str, ttl_s: float) -> bool:
        now = self._wall()
        lease = self._leases.get(name)
        if lease is None or lease.expires_at <= now or lease.holder == holder:
            self._leases[name] = _Lease(holder, now + ttl_s)
            return True
        return False

    async def release_lease(self, name: str, holder: str) -> bool:
        lease = self._leases.get(name)
        if lease is not None and lease.holder == holder:
            del self._leases[name]
            return True
        return False

    async def take_tokens(
        self, bucket: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenResult:
        if rate_per_s <= 0 or burst <= 0:
            raise ValueError("take_tokens: rate_per_s and burst must be > 0")  # as Redis's
        now = self._wall()
        if len(self._buckets) >= self._sweep_buckets_at and bucket not in self._buckets:
            self._buckets = {k: b for k, b in self._buckets.items() if b.full_at > now}
            # Amortised: the next sweep waits until the live ones have doubled.
            self._sweep_buckets_at = max(_BUCKETS_BEFORE_SWEEP, 2 * len(self._buckets))
        state = self._buckets.setdefault(bucket, _Bucket(burst, now))
        state.tokens = min(burst, state.tokens + max(0.0, now - state.at) * rate_per_s)
        state.at = now
        if state.tokens >= cost:
            state.tokens -= cost
            state.full_at = now + (burst - state.tokens) / rate_per_s
            return TokenResult(True, state.tokens, 0.0)
        state.full_at = now + (burst - state.tokens) / rate_per_s
        return TokenResult(False, state.tokens, (cost - state.tokens) / rate_per_s)

    async def summary(self) -> StoreSummary:
        now = self._wall()
        live = await self.pull(0.0, now)
        totals: dict[str, int] = {}
        for counts in live.in_flight.values():
            for backend, count in counts.items():
                totals[backend] = totals.get(backend, 0) + count
        return StoreSummary(
            backend=self.kind,
            key_counts={
                "in_flight": len(live.in_flight),
                "prefix": len(live.prefix),
                "lease": sum(1 for lease in self._leases.values() if lease.expires_at > now),
                "token_bucket": len(self._buckets),
            },
            leases={n: lease.holder for n, lease in self._leases.items() if lease.expires_at > now},
            in_flight=totals,
            replicas=tuple(sorted(live.in_flight)),
            prefix_blocks={b: len(blocks) for b, blocks in live.prefix.items()},
        )

    async def close(self) -> None:
        self._subscribers.clear()
