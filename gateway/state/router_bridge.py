"""Prefix affinity across replicas: what one replica's router learns, the others' routers know.

``SharedPrefixRouter`` wraps a ``PolicyRouter`` (same protocol, everything forwarded): a
decision tells the shared state its prompt's prefix blocks are on their way to the backend it
chose, and a request that finished well that they are cached on the backend that served it. ``RemotePrefixFeeder`` goes the other way: blocks other replicas
published, as they arrive in the local shared view, are recorded into the wrapped router's own
prefix index, a bounded number per event-loop turn, off the request path.

Why not feed remote blocks through ``observe()``: ``PipelineRouter.observe`` also releases an
in-flight reservation and counts an outcome in the learner, so a synthetic observation would
corrupt both. The feeder calls the router's ``note_remote_prefix(backend, {block: seen_at},
now)`` instead: blocks from other replicas arrive as a set (a Redis pull orders them by time,
not by chain), each with when it was seen, and the router keeps the newer time per block.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol, cast

from gateway.prefix_expiry import purger_of
from gateway.state.feed_turns import drain_in_turns
from gateway.state.sample_feeder import SamplePublisher
from gateway.state.sync import SharedStateSync
from routing.prefix_index import PurgeProgress
from routing.types import (
    Decision,
    FirstToken,
    FleetSnapshot,
    Observation,
    PolicyRouter,
    RequestProfile,
    first_token_observer,
)

_BLOCKS_PER_TURN = 2000  # ~2 ms of index work between yields to requests
_MAX_QUEUED_BLOCKS = 200_000  # beyond this the oldest arrivals are dropped (they age first)


class PrefixRecorder(Protocol):
    def note_remote_prefix(self, backend: str, blocks: Mapping[int, float], now: float) -> int: ...


def prefix_recorder_of(router: object) -> PrefixRecorder | None:
    """``router`` if its policy keeps a prefix index (``keeps_prefixes``), else None."""
    note = getattr(router, "note_remote_prefix", None)
    if callable(note) and getattr(router, "keeps_prefixes", False):
        return cast(PrefixRecorder, router)
    return None


class SharedPrefixRouter:
    """A ``PolicyRouter`` that shares the prefixes it learns. Request path: one dict update."""

    def __init__(
        self, inner: PolicyRouter, sync: SharedStateSync, samples: SamplePublisher | None = None
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._sync = sync
        self._first_tokens = first_token_observer(inner)
        self._samples = samples  # what ``inner`` learns at a first token, for the others

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        decision = self.inner.decide(profile, fleet, now)
        chosen = decision.chosen
        if chosen is not None and profile.prefix_hashes:
            # Shared at the decision, as the router's own index records it: replicas warming
            # one fleet together then follow each other's prompts seconds before any answer
            # is back (loadtests/sim/shared_prefixes.py measures it).
            self._sync.note_prefix(chosen.backend, profile.prefix_hashes)
        return decision

    def explain(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        return self.inner.explain(profile, fleet, now)

    def reserve(self, backend: str, now: float) -> None:
        self.inner.reserve(backend, now)

    def release(self, backend: str) -> None:
        self.inner.release(backend)

    def observe_canary(
        self,
        fleet: FleetSnapshot,
        backend: str,
        at: float,
        ttft_ms: float,
        prompt_tokens: int,
        cold_start: bool | None = None,
    ) -> bool:
        observe = getattr(self.inner, "observe_canary", None)
        if not callable(observe):
            return False
        return bool(observe(fleet, backend, at, ttft_ms, prompt_tokens, cold_start))

    def warm_up(self, fleet: FleetSnapshot, now: float) -> tuple[str, ...]:
        warm_up = getattr(self.inner, "warm_up", None)
        return tuple(warm_up(fleet, now)) if callable(warm_up) else ()

    def purge_step(self, now: float, max_scan: int) -> PurgeProgress:
        purger = purger_of(self.inner)
        return purger.purge_step(now, max_scan) if purger else PurgeProgress(0, 0, True, 0)

    def observe_first_token(self, first: FirstToken) -> None:
        if self._first_tokens is not None:
            self._first_tokens.observe_first_token(first)
        if self._samples is not None:
            self._samples.publish(first)

    def observe(self, observation: Observation) -> None:
        self.inner.observe(observation)
        if observation.ok and observation.prefix_hashes:
            self._sync.note_prefix(observation.backend, observation.prefix_hashes)


class RemotePrefixFeeder:
    """Queue of (backend, block, wall seen-at) from other replicas, drained into ``recorder``
    with times converted to the router's monotonic clock. ``recorder`` may be swapped (a
    reload that builds a new router); while it is None, arrivals are not kept."""

    def __init__(
        self,
        recorder: PrefixRecorder | None = None,
        *,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        max_queued: int = _MAX_QUEUED_BLOCKS,
    ) -> None:
        self.recorder = recorder
        self._wall = wall
        self._mono = mono
        self._queue: deque[tuple[str, int, float]] = deque(maxlen=max_queued)
        self._arrived = asyncio.Event()
        self.fed_blocks = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

    def offer(self, backend: str, blocks: Mapping[int, float]) -> None:
        """``SharedView.on_remote_prefix``: called synchronously as blocks are merged."""
        if self.recorder is None:
            return
        self._queue.extend((backend, block, seen_at) for block, seen_at in blocks.items())
        self._arrived.set()

    def drain(self, limit: int = _BLOCKS_PER_TURN) -> int:
        """Record up to ``limit`` queued blocks now; returns how many."""
        if self.recorder is None:
            self._queue.clear()
            return 0
        queue = self._queue
        now = self._mono()
        offset = now - self._wall()
        count = min(limit, len(queue))
        by_backend: dict[str, dict[int, float]] = {}
        for _ in range(count):
            backend, block, seen_at = queue.popleft()
            blocks = by_backend.setdefault(backend, {})
            at = seen_at + offset
            if blocks.get(block, -math.inf) < at:
                blocks[block] = at
        for backend, blocks in by_backend.items():
            self.recorder.note_remote_prefix(backend, blocks, now)
        self.fed_blocks += count
        return count

    async def run(self) -> None:
        """Until cancelled: wait for arrivals, drain them a turn's worth at a time."""
        await drain_in_turns(self._arrived, self.drain, _BLOCKS_PER_TURN)
