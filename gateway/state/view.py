"""The replica's local picture of shared state: plain dicts, read synchronously by the request
path, written only by ``SharedStateSync`` on the same event loop (so no locks are needed and
a read never waits).

Two hooks let the gateway follow what other replicas change without polling every entry:
``remote_version`` grows whenever their in-flight counts, signals or ejections change here,
``on_remote_prefix`` (if set) receives the prefix blocks merged in that were new or newer, and
``on_remote_samples`` (if set) the first-token samples another replica published.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from gateway.state.prefix_bounds import merge_newer, touch, trim
from gateway.state.records import Ejection, SharedPull, SignalRecord, WriteBatch, keep_newer
from gateway.state.samples import LearningSample
from gateway.state.store import Retention


class SharedView:
    def __init__(self, replica: str, retention: Retention) -> None:
        self.replica = replica
        self._keep = retention
        self._own_in_flight: dict[str, int] = {}
        self._remote_in_flight: dict[str, dict[str, int]] = {}  # replica -> backend -> count
        self._remote_expiry: dict[str, float] = {}  # replica -> wall time its counts lapse
        self._prefix: dict[str, dict[int, float]] = {}  # backend -> block -> seen at (wall)
        self._prefix_cutoff = 0.0  # blocks seen before this are expired, pruned or not
        self._signals: dict[str, SignalRecord] = {}
        self._ejections: dict[str, Ejection] = {}
        self.remote_version = 0
        self.on_remote_samples: Callable[[Sequence[LearningSample]], None] | None = None
        self.on_remote_prefix: Callable[[str, Mapping[int, float]], None] | None = None

    # -- reads (request path) ------------------------------------------------------------

    def in_flight(self, backend: str) -> int:
        """This replica's live count plus every other live replica's last reported count."""
        total = self._own_in_flight.get(backend, 0)
        for counts in self._remote_in_flight.values():
            total += counts.get(backend, 0)
        return total

    def in_flight_totals(self) -> dict[str, int]:
        totals = dict(self._own_in_flight)
        for counts in self._remote_in_flight.values():
            for backend, count in counts.items():
                totals[backend] = totals.get(backend, 0) + count
        return totals

    def remote_in_flight(self, backend: str) -> int:
        """Every other live replica's last reported count for ``backend``."""
        return sum(counts.get(backend, 0) for counts in self._remote_in_flight.values())

    def own_in_flight(self) -> Mapping[str, int]:
        return self._own_in_flight

    def stamped_at(self, backend: str, block: int) -> float | None:
        """When ``block`` of ``backend`` was last seen (wall s), by anyone; None: not held."""
        blocks = self._prefix.get(backend)
        return None if blocks is None else blocks.get(block)

    def cached_blocks(self, backend: str, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` the backend has probably cached. Hashes are
        chained, so the first miss ends the match."""
        index = self._prefix.get(backend)
        if not index:
            return 0
        cutoff = self._prefix_cutoff
        matched = 0
        for block in hashes:
            seen_at = index.get(block)
            if seen_at is None or seen_at < cutoff:
                break
            matched += 1
        return matched

    def newest_blocks(self, per_backend: int) -> dict[str, dict[int, float]]:
        """Up to ``per_backend`` most recently seen blocks of each backend."""
        out: dict[str, dict[int, float]] = {}
        for backend, blocks in self._prefix.items():
            newest: dict[int, float] = {}
            for block in reversed(blocks):
                if len(newest) >= per_backend:
                    break
                newest[block] = blocks[block]
            out[backend] = newest
        return out

    def prefix_sizes(self) -> dict[str, int]:
        return {backend: len(blocks) for backend, blocks in self._prefix.items()}

    def signal(self, backend: str) -> SignalRecord | None:
        return self._signals.get(backend)

    def signals(self) -> Mapping[str, SignalRecord]:
        return self._signals

    def ejection(self, backend: str) -> Ejection | None:
        return self._ejections.get(backend)

    def ejections(self) -> Mapping[str, Ejection]:
        return self._ejections

    # -- writes (SharedStateSync only) ---------------------------------------------------

    def add_in_flight(self, backend: str, delta: int) -> None:
        self._own_in_flight[backend] = max(0, self._own_in_flight.get(backend, 0) + delta)

    def add_prefix(self, backend: str, hashes: Iterable[int], now: float) -> None:
        touch(self._prefix.setdefault(backend, {}), hashes, now)

    def put_signal(self, backend: str, record: SignalRecord) -> None:
        keep_newer(self._signals, backend, record)

    def put_ejection(self, backend: str, ejection: Ejection) -> None:
        keep_newer(self._ejections, backend, ejection)

    def apply_batch(self, batch: WriteBatch, now: float) -> None:
        """Another replica's announced writes (ignored if they are our own)."""
        if batch.replica == self.replica:
            return
        if batch.in_flight is not None:
            self._remote_in_flight[batch.replica] = dict(batch.in_flight)
            self._remote_expiry[batch.replica] = now + self._keep.in_flight_ttl_s
        if batch.in_flight is not None or batch.signals or batch.ejections:
            self.remote_version += 1
        self._merge_records(batch.prefix, batch.signals, batch.ejections)
        if batch.samples and self.on_remote_samples is not None:
            self.on_remote_samples(batch.samples)

    def apply_pull(self, pull: SharedPull, now: float, with_prefix: bool = True) -> None:
        """Take in a refresh. ``with_prefix=False`` leaves the (possibly large) prefix part to
        ``merge_prefix`` calls the caller spreads over several event-loop turns."""
        others = {r: dict(c) for r, c in pull.in_flight.items() if r != self.replica}
        self._remote_in_flight = others
        self._remote_expiry = {r: now + self._keep.in_flight_ttl_s for r in others}
        self.remote_version += 1
        self._merge_records(pull.prefix if with_prefix else {}, pull.signals, pull.ejections)

    def merge_prefix(self, backend: str, blocks: Mapping[int, float]) -> None:
        listener = self.on_remote_prefix
        if listener is None:
            merge_newer(self._prefix.setdefault(backend, {}), blocks)
            return
        accepted: dict[int, float] = {}
        merge_newer(self._prefix.setdefault(backend, {}), blocks, accepted)
        if accepted:
            listener(backend, accepted)

    def _merge_records(
        self,
        prefix: Mapping[str, Mapping[int, float]],
        signals: Mapping[str, SignalRecord],
        ejections: Mapping[str, Ejection],
    ) -> None:
        for backend, blocks in prefix.items():
            self.merge_prefix(backend, blocks)
        for backend, record in signals.items():
            keep_newer(self._signals, backend, record)
        for backend, ejection in ejections.items():
            keep_newer(self._ejections, backend, ejection)

    def prune(self, now: float) -> None:
        """Forget what has outlived its TTL or bound. Cost is proportional to what is dropped."""
        keep = self._keep
        for replica in [r for r, at in self._remote_expiry.items() if at <= now]:
            del self._remote_expiry[replica]
            self._remote_in_flight.pop(replica, None)
            self.remote_version += 1
        self._prefix_cutoff = now - keep.prefix_ttl_s
        for backend, blocks in list(self._prefix.items()):
            trim(blocks, self._prefix_cutoff, keep.prefix_blocks_per_backend)
            if not blocks:  # a backend no longer served costs nothing
                del self._prefix[backend]
        stale = [b for b, s in self._signals.items() if now - s.at > keep.signal_ttl_s]
        for backend in stale:
            del self._signals[backend]
        expired = [b for b, e in self._ejections.items() if now - e.at > keep.ejection_ttl_s]
        for backend in expired:
            del self._ejections[backend]
        if stale or expired:
            self.remote_version += 1
