"""Writes made on the request path, waiting for the flusher to pipeline them to the store.

Bounded: while the store is unreachable the oldest unsent prefix blocks are dropped first
(they would be the first to expire anyway); signals and ejections keep only the newest value
per backend; in-flight counts are absolute and just marked dirty.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from gateway.state.prefix_bounds import merge_newer, touch, trim
from gateway.state.records import Ejection, SignalRecord, WriteBatch, keep_newer
from gateway.state.samples import LearningSample

# First-token samples kept for one flush (50 ms): ~20k requests/s per replica. Beyond, or
# while the store is down, the oldest go: a sample is worth little once the next are in.
_MAX_SAMPLES = 1024


class PendingWrites:
    def __init__(self, replica: str, max_blocks_per_backend: int, max_blocks_per_flush: int):
        self._replica = replica
        self._max_blocks = max_blocks_per_backend
        self._max_per_flush = max_blocks_per_flush
        self._prefix: dict[str, dict[int, float]] = {}
        self._signals: dict[str, SignalRecord] = {}
        self._ejections: dict[str, Ejection] = {}
        self._samples: deque[LearningSample] = deque(maxlen=_MAX_SAMPLES)
        self.dropped_samples = 0
        self.in_flight_dirty = True  # the first flush announces this replica
        self.dropped_blocks = 0

    def is_empty(self) -> bool:
        """Nothing to push (a due heartbeat aside)."""
        return not (
            self.in_flight_dirty or self._prefix or self._signals or self._ejections
            or self._samples
        )  # fmt: skip

    def block_count(self) -> int:
        return sum(len(blocks) for blocks in self._prefix.values())

    def add_prefix(self, backend: str, hashes: Iterable[int], now: float) -> None:
        blocks = self._prefix.setdefault(backend, {})
        touch(blocks, hashes, now)
        if len(blocks) > self._max_blocks:
            self.dropped_blocks += trim(blocks, float("-inf"), self._max_blocks)

    def add_blocks(self, backend: str, blocks: Mapping[int, float]) -> None:
        """Re-queue blocks with their original times (after a failed push or a reconnect)."""
        pending = self._prefix.setdefault(backend, {})
        merge_newer(pending, blocks)
        if len(pending) > self._max_blocks:
            self.dropped_blocks += trim(pending, float("-inf"), self._max_blocks)

    def put_signal(self, backend: str, record: SignalRecord) -> None:
        keep_newer(self._signals, backend, record)

    def put_ejection(self, backend: str, ejection: Ejection) -> None:
        keep_newer(self._ejections, backend, ejection)

    def add_sample(self, sample: LearningSample) -> None:
        if len(self._samples) == self._samples.maxlen:
            self.dropped_samples += 1
        self._samples.append(sample)

    def take(self, in_flight: Mapping[str, int] | None, now: float) -> WriteBatch:
        """Everything due now, with at most ``max_blocks_per_flush`` prefix blocks (the rest
        waits for the next flush, so one push stays well inside its timeout)."""
        prefix: dict[str, dict[int, float]] = {}
        budget = self._max_per_flush
        for backend in list(self._prefix):
            if budget <= 0:
                break
            blocks = self._prefix[backend]
            if len(blocks) <= budget:
                prefix[backend] = self._prefix.pop(backend)
                budget -= len(blocks)
            else:
                taken = list(blocks.items())[:budget]
                prefix[backend] = dict(taken)
                for block, _ in taken:
                    del blocks[block]
                budget = 0
        batch = WriteBatch(
            replica=self._replica,
            at=now,
            in_flight=in_flight,
            prefix=prefix,
            signals=self._signals,
            ejections=self._ejections,
            samples=tuple(self._samples),
        )
        self._signals, self._ejections = {}, {}
        self._samples.clear()
        self.in_flight_dirty = False
        return batch

    def restore(self, batch: WriteBatch) -> None:
        """Put back a batch the store did not take, keeping anything newer written since (not
        its samples: by the time the store is back, newer ones say more)."""
        for backend, blocks in batch.prefix.items():
            self.add_blocks(backend, blocks)
        for backend, record in batch.signals.items():
            self.put_signal(backend, record)
        for backend, ejection in batch.ejections.items():
            self.put_ejection(backend, ejection)
        if batch.in_flight is not None:
            self.in_flight_dirty = True
