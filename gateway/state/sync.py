"""``SharedStateSync``: one per replica. The request path calls its synchronous methods, which
only touch local dicts; background tasks move state to and from the store.

    sync = SharedStateSync.from_config(config.state)
    await sync.start()                       # never blocks on Redis; degraded until it answers
    sync.note_in_flight("a1", +1)            # request path: O(1), no I/O
    sync.note_prefix("a1", profile.prefix_hashes)
    sync.snapshot().cached_blocks("a1", profile.prefix_hashes)
    sync.contend(["probe:a1"]); sync.is_leader("probe:a1")
    await sync.stop()                        # flushes, releases leases, drops own counts
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

from gateway.signals.tasks import sleep_aligned
from gateway.state.breaker import CircuitBreaker
from gateway.state.cancel import raise_if_cancelled
from gateway.state.config import StateConfig
from gateway.state.connect import open_store, retention_of
from gateway.state.errors import StateUnavailable
from gateway.state.health import HealthStatus, StateHealth
from gateway.state.leases import LeaseKeeper
from gateway.state.parking import Parking
from gateway.state.pending import PendingWrites
from gateway.state.records import Ejection, SignalRecord, TokenResult
from gateway.state.samples import LearningSample
from gateway.state.store import StateStore
from gateway.state.store_guard import StoreGuard
from gateway.state.view import SharedView

_log = logging.getLogger(__name__)
_MAX_BLOCKS_PER_FLUSH = 5000  # keeps one pipelined push well inside its timeout
_REPUBLISH_BLOCKS_PER_BACKEND = 2000  # newest local blocks re-sent when the store returns
_EVENTS_RETRY_S = 0.1  # how soon a healthy store gets (re)subscribed
_EVENTS_BACKOFF_S = 0.5  # after a broken subscription
_RESTAMP_S = 1.0  # a prefix chain noted this recently is not noted again (at most ttl / 10)


def default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


class SharedStateSync:
    def __init__(
        self,
        store: StateStore,
        config: StateConfig,
        *,
        replica_id: str | None = None,
        owns_store: bool = False,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.replica = replica_id or config.replica_id or default_replica_id()
        self._store = store
        self._config = config
        self._owns_store = owns_store
        self._wall = wall
        self._mono = mono
        self._view = SharedView(self.replica, retention_of(config))
        self._restamp_s = min(_RESTAMP_S, config.bounds.prefix_ttl_s / 10)
        self._pending = PendingWrites(
            self.replica, config.bounds.pending_blocks_per_backend, _MAX_BLOCKS_PER_FLUSH
        )
        timeouts = config.timeouts
        breaker = CircuitBreaker(timeouts.breaker_failures, timeouts.breaker_reset_s, mono)
        self._guard = StoreGuard(store.kind, self.replica, breaker, mono, self._reconcile)
        self._leases = LeaseKeeper(self.replica, config.intervals.lease_period_s, mono)
        self._tasks: list[asyncio.Task[None]] = []
        self._need_full_pull = True
        self._last_pull_wall = 0.0
        self._last_heartbeat = float("-inf")
        self._events_live = False
        self._subscriptions = 0  # events subscriptions made so far: which one is live
        self._pulled_under: int | None = None  # the subscription live when the last pull began
        self.pulls = 0  # refreshes done
        self.prefix_pulls = 0  # of them, those that asked the store for prefix blocks
        self._parking = Parking()  # the idle flusher waits there until a write is queued
        self.flush_ticks = 0  # flusher wake-ups: an idle one sleeps until a write or heartbeat

    @classmethod
    def from_config(
        cls,
        config: StateConfig,
        *,
        replica_id: str | None = None,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> SharedStateSync:
        """The sync with the store ``config`` selects, closed by ``stop()``. Raises
        ``StateUnavailable`` (kind config) if the configured password cannot be read."""
        store = open_store(config, wall)
        return cls(store, config, replica_id=replica_id, owns_store=True, wall=wall, mono=mono)

    # -- request path: synchronous, local memory only ------------------------------------

    def note_in_flight(self, backend: str, delta: int) -> None:
        self._view.add_in_flight(backend, delta)
        self._pending.in_flight_dirty = True
        self._parking.wake()

    def note_prefix(self, backend: str, hashes: Sequence[int]) -> None:
        if hashes:
            now = self._wall()
            # A chain's blocks are stamped together and its shorter prefixes only ever later,
            # so a deepest block stamped within ``_restamp_s`` means the whole chain was: not
            # sent again (a request notes its prompt at the decision and again once served).
            # Expiry then moves by at most ``_restamp_s``.
            deepest = self._view.stamped_at(backend, hashes[-1])
            if deepest is not None and now - deepest < self._restamp_s:
                return
            self._view.add_prefix(backend, hashes, now)
            self._pending.add_prefix(backend, hashes, now)
            self._parking.wake()

    def note_signal(self, backend: str, record: SignalRecord) -> None:
        self._view.put_signal(backend, record)
        self._pending.put_signal(backend, record)
        self._parking.wake()

    def note_sample(self, sample: LearningSample) -> None:
        """A first token our router learned from, published for the others (not stored)."""
        if not self._private():  # a store private to this process has no other reader
            self._pending.add_sample(sample)
            self._parking.wake()

    def note_ejection(self, backend: str, ejection: Ejection) -> None:
        self._view.put_ejection(backend, ejection)
        self._pending.put_ejection(backend, ejection)
        self._parking.wake()

    def snapshot(self) -> SharedView:
        return self._view

    def contend(self, lease_names: Iterable[str]) -> None:
        """Ask to hold these leases (e.g. one per backend or region to probe)."""
        self._leases.want(lease_names)

    def is_leader(self, lease_name: str) -> bool:
        if self._leases.is_held(lease_name):
            return True
        return self._config.leader_when_degraded and self._guard.degraded()

    def health(self) -> StateHealth:
        guard = self._guard
        return StateHealth(
            status=HealthStatus.DEGRADED if guard.degraded() else HealthStatus.OK,
            backend=self._store.kind,
            replica=self.replica,
            breaker=self._guard.breaker.state,
            last_ok_age_s=None if guard.last_ok is None else self._mono() - guard.last_ok,
            pending_blocks=self._pending.block_count(),
            leases_held=tuple(self._leases.held()),
            events_live=self._events_live,
            last_error=guard.last_error,
            degraded_spells=guard.spells,
        )

    def _private(self) -> bool:
        """A memory store this sync opened itself has no other reader (one process, one
        replica): pushing to it every ``flush_s`` under load would only wake the loop."""
        return self._owns_store and self._store.kind == "memory"

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        loops = [self._refresh_loop, self._events_loop, self._lease_loop]
        if not self._private():
            loops.insert(0, self._flush_loop)
        self._tasks = [asyncio.create_task(loop(), name=loop.__name__) for loop in loops]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        # Best effort, each bounded by the store's timeout: a clean exit leaves nothing behind.
        with contextlib.suppress(StateUnavailable):
            await self.flush_now()
        for name in self._leases.forget():
            with contextlib.suppress(StateUnavailable):
                await self._guard.call("release_lease", functools.partial(self._release, name))
        with contextlib.suppress(StateUnavailable):
            await self._guard.call(
                "forget_replica", lambda: self._store.forget_replica(self.replica)
            )
        if self._owns_store:
            await self._store.close()

    async def _release(self, name: str) -> bool:
        return await self._store.release_lease(name, self.replica)

    # -- background work -----------------------------------------------------------------

    async def take_tokens(
        self, bucket: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenResult | None:
        """Shared token bucket; None when the store cannot answer (decide locally then).
        Not for the request path: use it to refill a local allowance in the background."""
        try:
            return await self._guard.call(
                "take_tokens", lambda: self._store.take_tokens(bucket, rate_per_s, burst, cost)
            )
        except StateUnavailable:
            return None

    async def flush_now(self) -> None:
        """Push what is pending (and the heartbeat, if due). Raises ``StateUnavailable``."""
        now = self._wall()
        heartbeat_due = (
            self._mono() - self._last_heartbeat >= self._config.intervals.in_flight_ttl_s / 3
        )
        in_flight = None
        if heartbeat_due or self._pending.in_flight_dirty:
            in_flight = dict(self._view.own_in_flight())
        batch = self._pending.take(in_flight, now)
        if batch.is_empty():
            return
        try:
            await self._guard.call("push", lambda: self._store.push(batch))
        except StateUnavailable:
            self._pending.restore(batch)
            raise
        if in_flight is not None:
            self._last_heartbeat = self._mono()

    async def refresh_now(self) -> None:
        """Pull from the store into the local view. Raises ``StateUnavailable``."""
        now = self._wall()
        margin = max(2 * self._config.intervals.refresh_s, 1.0)  # writers' clocks and lag
        since = 0.0 if self._need_full_pull else self._last_pull_wall - margin
        live = self._subscriptions if self._events_live else None
        if not self._need_full_pull and live is not None and live == self._pulled_under:
            # Subscribed since before the last pull began, to a store that ends a subscription
            # rather than lose a batch: every block written since came as an event.
            since = now + 1.0  # later than anything: no prefix blocks in this pull
        else:
            self.prefix_pulls += 1
        pull = await self._guard.call("pull", lambda: self._store.pull(since, now))
        self._pulled_under = live if self._store.events_lossless else None
        self.pulls += 1
        self._view.apply_pull(pull, self._wall(), with_prefix=False)
        for backend, blocks in pull.prefix.items():
            self._view.merge_prefix(backend, blocks)
            await asyncio.sleep(0)  # a full pull is large: let requests run in between
        self._last_pull_wall = now
        self._need_full_pull = False

    async def _flush_loop(self) -> None:
        await self._forever(self._flush_tick, lambda: self._config.intervals.flush_s, first=False)

    async def _flush_tick(self) -> None:
        self.flush_ticks += 1
        self._view.prune(self._wall())
        if self._guard.breaker.ready():
            with contextlib.suppress(StateUnavailable):
                await self.flush_now()
        if self._pending.is_empty():
            await self._parking.park(self._heartbeat_due_in() - self._config.intervals.flush_s)

    def _heartbeat_due_in(self) -> float:
        """Seconds until this replica's in-flight counts must be re-sent to stay alive."""
        ttl_s = self._config.intervals.in_flight_ttl_s
        return self._last_heartbeat + ttl_s / 3 - self._mono()

    async def _refresh_loop(self) -> None:
        await self._forever(
            self._refresh_tick, lambda: self._config.intervals.refresh_s, aligned=True
        )

    async def _refresh_tick(self) -> None:
        self._view.prune(self._wall())  # the flusher prunes too, but sleeps while idle
        if self._guard.breaker.ready():
            with contextlib.suppress(StateUnavailable):
                await self.refresh_now()

    async def _events_loop(self) -> None:
        await self._forever(self._follow_events, lambda: _EVENTS_RETRY_S)

    async def _follow_events(self) -> None:
        if self._guard.degraded():
            return
        try:
            async for batch in self._store.events():
                if not self._events_live:
                    self._subscriptions += 1
                self._events_live = True
                if batch is not None:
                    self._view.apply_batch(batch, self._wall())
        except StateUnavailable as exc:
            self._guard.last_error = str(exc.error)
        finally:
            self._events_live = False
        self._need_full_pull = True  # whatever was announced meanwhile is lost
        await asyncio.sleep(_EVENTS_BACKOFF_S)

    async def _lease_loop(self) -> None:
        await self._forever(self._lease_tick, lambda: self._leases.renew_every_s, aligned=True)

    async def _lease_tick(self) -> None:
        if not (self._leases.wanted() and self._guard.breaker.ready()):
            return
        ttl_s = self._leases.ttl_s

        async def try_lease(name: str) -> bool:
            return await self._guard.call(
                "try_lease", lambda: self._store.try_lease(name, self.replica, ttl_s)
            )

        await self._leases.renew(try_lease)

    async def _forever(
        self,
        tick: Callable[[], Awaitable[None]],
        interval: Callable[[], float],
        first: bool = True,
        aligned: bool = False,
    ) -> None:
        """Run ``tick`` every ``interval()`` seconds until cancelled. A bug in one tick is
        logged and the loop goes on: losing a background task would freeze shared state.
        ``aligned``: each wait ends on a whole multiple of the interval (sleep_aligned), with the
        gateway's other housekeeping loops, instead of an interval after the tick."""

        def pause() -> Awaitable[None]:
            return sleep_aligned(interval()) if aligned else asyncio.sleep(interval())

        if not first:
            await pause()
        while True:
            try:
                await tick()
            except Exception:
                raise_if_cancelled()
                _log.exception("state sync: %s failed; retrying", tick.__name__)
            raise_if_cancelled()  # a tick may have swallowed it (StateUnavailable, suppress)
            await pause()

    # -- the store answers again (StoreGuard calls this) ----------------------------------

    def _reconcile(self) -> None:
        """The store answers again (or for the first time): announce this replica, re-send
        the newest local blocks (the store may have restarted empty), and pull everything."""
        self._need_full_pull = True
        self._pending.in_flight_dirty = True
        for backend, blocks in self._view.newest_blocks(_REPUBLISH_BLOCKS_PER_BACKEND).items():
            self._pending.add_blocks(backend, blocks)
        self._parking.wake()
