"""Learning across replicas: the first tokens one replica's router learned from teach the
routers of the other replicas of its region (and the other workers of its host), so they
route as one learner (``routing.peer_learning``; issue 16).

``SamplePublisher`` is called by ``SharedPrefixRouter.observe_first_token`` right after its
own router learned (one dict build and a deque append: no I/O on the request path);
``RemoteSampleFeeder`` receives the samples other replicas published, as the shared view
applies their batches, and feeds them to the router a bounded number per event-loop turn,
converting their wall-clock times to the router's monotonic clock. Samples from another
region are dropped on arrival: a path's cost belongs to where the request came from.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol, cast

from gateway.state.feed_turns import drain_in_turns
from gateway.state.samples import LearningSample
from gateway.state.sync import SharedStateSync
from routing.learned_columns import LearnedFrame
from routing.types import FirstToken

_SAMPLES_PER_TURN = 256  # ~1 ms of learning between yields to requests
_MAX_QUEUED_SAMPLES = 8192  # beyond this the oldest arrivals are dropped


class PeerLearningRouter(Protocol):
    def learned_frame(self, backend: str) -> LearnedFrame | None: ...

    def observe_peer_first_token(self, first: FirstToken, frame: LearnedFrame) -> None: ...


def peer_learner_of(router: object) -> PeerLearningRouter | None:
    """``router`` if its policy learns from other gateways' first tokens, else None."""
    if getattr(router, "learns_from_peers", False):
        return cast(PeerLearningRouter, router)
    return None


class SamplePublisher:
    """Publishes what ``learner`` learned from a first token, in the frame it predicted in."""

    def __init__(
        self,
        learner: PeerLearningRouter,
        sync: SharedStateSync,
        region: str,
        *,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self._learner = learner
        self._sync = sync
        self._region = region
        self._wall = wall
        self._mono = mono
        self.published = 0

    def publish(self, first: FirstToken) -> None:
        frame = self._learner.learned_frame(first.backend)
        if frame is None or not first.predicted_terms_ms:
            return  # nothing this router predicted: nothing a peer can re-express
        at = first.at + (self._wall() - self._mono())
        self._sync.note_sample(LearningSample.of(self._region, first, at, frame))
        self.published += 1


class RemoteSampleFeeder:
    """Queue of other replicas' samples, drained into ``learner``. ``learner`` may be swapped
    (a reload that builds a new router); while it is None, arrivals are not kept."""

    def __init__(
        self,
        region: str,
        learner: PeerLearningRouter | None = None,
        *,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        max_queued: int = _MAX_QUEUED_SAMPLES,
    ) -> None:
        self.region = region
        self.learner = learner
        self._wall = wall
        self._mono = mono
        self._queue: deque[LearningSample] = deque(maxlen=max_queued)
        self._arrived = asyncio.Event()
        self.fed = 0
        self.other_region = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

    def offer(self, samples: Sequence[LearningSample]) -> None:
        """``SharedView.on_remote_samples``: called synchronously as a batch is applied."""
        if self.learner is None:
            return
        for sample in samples:
            if sample.region == self.region:
                self._queue.append(sample)
            else:
                self.other_region += 1
        if self._queue:
            self._arrived.set()

    def drain(self, limit: int = _SAMPLES_PER_TURN) -> int:
        """Teach up to ``limit`` queued samples now; returns how many."""
        learner = self.learner
        if learner is None:
            self._queue.clear()
            return 0
        queue = self._queue
        offset = self._mono() - self._wall()
        count = min(limit, len(queue))
        for _ in range(count):
            sample = queue.popleft()
            learner.observe_peer_first_token(sample.first_token(sample.at + offset), sample.frame)
        self.fed += count
        return count

    async def run(self) -> None:
        """Until cancelled: wait for arrivals, drain them a turn's worth at a time."""
        await drain_in_turns(self._arrived, self.drain, _SAMPLES_PER_TURN)
