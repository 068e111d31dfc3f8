"""Which prompt prefix blocks each backend has probably cached: bounded, expiring, approximate.

Chained block hashes make every chain *prefix-closed*: a backend that served block ``i`` of a
chain also served blocks ``0..i-1`` at the same time or later, and a record refreshes the whole
chain. So timestamps never increase along a chain, expiry (``ttl_s``) and oldest-first eviction
keep each backend's set prefix-closed, and "how many leading blocks does backend b hold" is a
binary search instead of a walk. Across backends, the set of holders of block ``i`` only
shrinks with ``i``; bisecting on it finds every backend's depth with a few dict probes per
distinct depth, which is what keeps a 100-backend x 250-block lookup cheap.

Holders are a bitmask per block (one bit per backend), not a set: a one-element ``set`` costs
216 bytes and is tracked by the garbage collector, so two million of them made every entry
~360 bytes and a full collection take about a second. With masks an entry is ~150 bytes
(measured: ``docs/memory.md``) and the index holds no container the collector must walk.

Approximate on purpose: the index learns from what this router sent, not from the engines'
eviction, so ``ttl_s`` should be about how long an engine keeps an idle prefix. In the same
spirit, ``refresh_s`` (0: exact) lets a record leave a chain's times alone when its deepest
held block was stamped no longer than that ago: re-stamping 250 blocks is ~10 us per record,
most of a decision's prefix work, for an expiry moved by at most ``refresh_s``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat

_KEEP_FRACTION = 0.75  # compaction keeps the newest 3/4, so it runs at most every n/4 inserts


@dataclass(frozen=True, slots=True)
class PrefixIndexReport:
    entries: int
    distinct_blocks: int
    per_backend: Mapping[str, int]
    approx_bytes: int
    max_entries_per_backend: int
    max_entries_total: int
    evicted: int
    expired: int


@dataclass(frozen=True, slots=True)
class PurgeProgress:
    """What one bounded ``purge_step`` did; ``round_done`` once every backend present at the
    start of the sweep round has been scanned (the next step starts a new round)."""

    scanned: int
    removed: int
    round_done: bool
    entries: int  # left in the index after this step


class PrefixIndex:
    def __init__(
        self,
        block_tokens: int = 16,
        ttl_s: float = 600.0,
        max_entries_per_backend: int = 50_000,
        max_entries_total: int = 1_000_000,
        refresh_s: float = 0.0,
    ) -> None:
        if block_tokens <= 0 or ttl_s <= 0 or max_entries_per_backend <= 0:
            raise ValueError("block_tokens, ttl_s and max_entries_per_backend must be > 0")
        if max_entries_total < max_entries_per_backend:
            raise ValueError("max_entries_total must be >= max_entries_per_backend")
        if not 0.0 <= refresh_s < ttl_s:
            raise ValueError("refresh_s must be >= 0 and < ttl_s")
        self.refresh_s = refresh_s
        self.block_tokens = block_tokens
        self.ttl_s = ttl_s
        self.max_entries_per_backend = max_entries_per_backend
        self.max_entries_total = max_entries_total
        self._holders: dict[int, int] = {}  # block hash -> bitmask of the backends holding it
        self._bit: dict[str, int] = {}  # backend -> its bit (a power of two)
        self._named: dict[int, str] = {}  # bit -> backend
        self._free_bits: list[int] = []  # bits of forgotten backends, for reuse
        self._seen: dict[str, dict[int, float]] = {}  # backend -> block hash -> last served
        self._total = 0
        self._evicted = 0
        self._expired = 0
        # The sweep in progress (``purge_step``): backends still to scan, and the current
        # backend's block snapshot, consumed from the end.
        self._sweep_queue: list[str] = []
        self._sweep_backend: str | None = None
        self._sweep_blocks: list[int] = []

    # -- writing ------------------------------------------------------------------------------

    def record(self, backend: str, hashes: Sequence[int], now: float) -> None:
        """``backend`` has just been sent (or served) a prompt with this block chain."""
        if not hashes:
            return
        seen = self._seen.get(backend)
        if seen is None:
            seen = self._seen[backend] = {}
        held = _held_depth(seen, hashes, None)
        stamp, stamped = now, hashes
        if held and self.refresh_s:
            oldest = seen[hashes[held - 1]]  # times never increase along a chain
            if oldest >= now - self.refresh_s:  # fresh enough: only new blocks are written,
                if held == len(hashes):  # at the same time (never newer than those before)
                    return
                stamp, stamped = oldest, hashes[held:]
        holders, bit = self._holders, self._bit_of(backend)
        for block in hashes[held:]:
            holders[block] = holders.get(block, 0) | bit
        before = len(seen)
        seen.update(zip(stamped, repeat(stamp)))  # cheaper than dict.fromkeys for long chains
        self._total += len(seen) - before
        if len(seen) > self.max_entries_per_backend:
            self._shrink(backend, int(self.max_entries_per_backend * _KEEP_FRACTION), now)
        if self._total > self.max_entries_total:
            self._shrink_all(now)

    def merge(self, backend: str, blocks: Mapping[int, float], now: float) -> int:
        """Blocks ``backend`` was seen holding elsewhere (another replica's router), each with
        when it was seen; a block already known keeps the newer time. Blocks need not form a
        chain: replicas publish sets. Seen-at times after ``now`` count as ``now``; blocks
        already expired are skipped. Returns how many blocks were new or refreshed."""
        cutoff = now - self.ttl_s
        seen = self._seen.get(backend)
        if seen is None:
            seen = self._seen[backend] = {}
        holders, bit = self._holders, self._bit_of(backend)
        changed = 0
        for block, seen_at in blocks.items():
            at = min(seen_at, now)
            known = seen.get(block)
            if at < cutoff or (known is not None and known >= at):
                continue
            if known is None:
                holders[block] = holders.get(block, 0) | bit
                self._total += 1
            seen[block] = at
            changed += 1
        if not seen:
            self._retire(backend)
        elif len(seen) > self.max_entries_per_backend:
            self._shrink(backend, int(self.max_entries_per_backend * _KEEP_FRACTION), now)
        if self._total > self.max_entries_total:
            self._shrink_all(now)
        return changed

    def forget(self, backend: str) -> None:
        """Drop everything about ``backend`` (removed from the fleet, or restarted)."""
        seen = self._seen.get(backend)
        if seen is not None:
            self._drop(backend, seen, list(seen))
            self._retire(backend)

    def purge(self, now: float) -> int:
        """Remove expired entries everywhere, in one go; returns how many. A full index takes
        ~100 ms of CPU: a server calls ``purge_step`` instead and yields between steps."""
        self._sweep_queue, self._sweep_backend, self._sweep_blocks = [], None, []
        return self.purge_step(now, sys.maxsize).removed

    def purge_step(self, now: float, max_scan: int) -> PurgeProgress:
        """Remove expired entries, looking at no more than ``max_scan`` of them.

        Successive calls sweep the whole index: a round takes a snapshot of the backends, then
        of each backend's blocks, and checks every block's age *now* (a block refreshed since
        the snapshot stays; one dropped since is skipped). Bounded work per call is what keeps
        a purge of two million entries from stalling an event loop: call it off the request
        path and yield between calls until ``round_done``."""
        if max_scan <= 0:
            raise ValueError("max_scan must be > 0")
        if self._sweep_backend is None and not self._sweep_queue:
            self._sweep_queue = list(self._seen)
        cutoff = now - self.ttl_s
        scanned = removed = 0
        while scanned < max_scan:
            blocks = self._sweep_blocks
            if not blocks:
                if not self._sweep_queue:
                    self._sweep_backend = None
                    self._expired += removed
                    return PurgeProgress(scanned, removed, True, self._total)
                backend = self._sweep_backend = self._sweep_queue.pop()
                self._sweep_blocks = list(self._seen.get(backend, ()))
                continue
            take = min(max_scan - scanned, len(blocks))
            batch = blocks[len(blocks) - take :]
            del blocks[len(blocks) - take :]
            scanned += take
            current = self._sweep_backend or ""
            seen = self._seen.get(current)
            if seen is None:  # forgotten since the snapshot
                blocks.clear()
                continue
            stale = [block for block in batch if seen.get(block, cutoff) < cutoff]
            removed += self._drop(current, seen, stale)
            if not seen:
                self._retire(current)
        self._expired += removed
        return PurgeProgress(scanned, removed, False, self._total)

    # -- reading ------------------------------------------------------------------------------

    def longest_cached_prefix(self, backend: str, hashes: Sequence[int], now: float) -> int:
        """Prompt tokens ``backend`` probably holds, as the longest unexpired chain prefix."""
        seen = self._seen.get(backend)
        if not seen or not hashes or hashes[0] not in seen:
            return 0
        return _held_depth(seen, hashes, now - self.ttl_s) * self.block_tokens

    def cached_tokens(self, hashes: Sequence[int], now: float) -> dict[str, int]:
        """Cached prompt tokens for every backend holding at least the first block."""
        if not hashes:
            return {}
        first = self._holders.get(hashes[0])
        if not first:
            return {}
        depths: dict[int, int] = {}
        _bisect_depths(self._holders, hashes, 0, first, len(hashes), 0, depths)
        cutoff = now - self.ttl_s
        tokens = self.block_tokens
        out: dict[str, int] = {}
        named = self._named
        for bit, depth in depths.items():
            backend = named[bit]
            seen = self._seen[backend]
            last = seen.get(hashes[depth - 1])
            if last is None or last < cutoff:
                depth = _held_depth(seen, hashes[: depth - 1], cutoff)
            if depth:
                out[backend] = depth * tokens
        return out

    def entries(self, backend: str) -> int:
        """Blocks recorded for ``backend`` (expired ones included until purged)."""
        seen = self._seen.get(backend)
        return len(seen) if seen else 0

    def memory_report(self) -> PrefixIndexReport:
        approx = sys.getsizeof(self._holders) + sys.getsizeof(self._seen)
        approx += sum(sys.getsizeof(seen) for seen in self._seen.values())
        approx += len(self._holders) * 32  # the 64-bit hash ints (masks of <= 8 bits are cached)
        return PrefixIndexReport(
            entries=self._total,
            distinct_blocks=len(self._holders),
            per_backend={backend: len(seen) for backend, seen in self._seen.items()},
            approx_bytes=approx,
            max_entries_per_backend=self.max_entries_per_backend,
            max_entries_total=self.max_entries_total,
            evicted=self._evicted,
            expired=self._expired,
        )

    # -- bounding -----------------------------------------------------------------------------

    def _shrink(self, backend: str, keep: int, now: float) -> None:
        seen = self._seen[backend]
        cutoff = now - self.ttl_s
        stale = [block for block, at in seen.items() if at < cutoff]
        self._expired += self._drop(backend, seen, stale)
        if len(seen) <= keep:
            return
        # Newest first, and among equal times the earlier inserted (shallower) block first:
        # eviction then takes the deep end of chains and keeps every chain prefix-closed.
        items = list(seen.items())
        ranked = sorted(range(len(items)), key=lambda i: -items[i][1])
        victims = [items[i][0] for i in ranked[keep:]]
        self._evicted += self._drop(backend, seen, victims)

    def _shrink_all(self, now: float) -> None:
        share = self.max_entries_total * _KEEP_FRACTION / self._total
        for backend, seen in list(self._seen.items()):
            self._shrink(backend, int(len(seen) * share), now)

    def _drop(self, backend: str, seen: dict[int, float], blocks: list[int]) -> int:
        holders, keep = self._holders, ~self._bit[backend]
        for block in blocks:
            seen.pop(block, None)
            mask = holders.get(block)
            if mask is not None:
                mask &= keep
                if mask:
                    holders[block] = mask
                else:
                    del holders[block]
        self._total -= len(blocks)
        return len(blocks)

    def _bit_of(self, backend: str) -> int:
        bit = self._bit.get(backend)
        if bit is None:
            bit = self._free_bits.pop() if self._free_bits else 1 << len(self._bit)
            self._bit[backend] = bit
            self._named[bit] = backend
        return bit

    def _retire(self, backend: str) -> None:
        """``backend`` holds nothing any more: its bit may serve another backend."""
        del self._seen[backend]
        bit = self._bit.pop(backend)
        del self._named[bit]
        self._free_bits.append(bit)


def matching_chain(
    hashes: Sequence[int], block_tokens: int, index_block_tokens: int
) -> Sequence[int]:
    """``hashes`` (of ``block_tokens``-token blocks) as a chain of the index's block size.

    A chained hash names its whole prefix, so every k-th hash of a fine chain names the
    prefixes a k-times coarser chain would: an index may use coarser blocks than the
    profiles (fewer entries, cheaper lookups). A size that is not a multiple cannot be
    matched; affinity is then ignored rather than miscounted.
    """
    if block_tokens == index_block_tokens:
        return hashes
    if index_block_tokens % block_tokens:
        return ()
    step = index_block_tokens // block_tokens
    return hashes[step - 1 :: step]


def _held_depth(seen: Mapping[int, float], hashes: Sequence[int], cutoff: float | None) -> int:
    """Number of leading blocks of ``hashes`` in ``seen`` no older than ``cutoff`` (if given)."""
    lo, hi = 0, len(hashes)  # invariant: blocks [0, lo) held; block hi and beyond not held
    while lo < hi:
        mid = (lo + hi) // 2
        at = seen.get(hashes[mid])
        if at is not None and (cutoff is None or at >= cutoff):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _bisect_depths(
    holders: Mapping[int, int],
    hashes: Sequence[int],
    lo: int,
    at_lo: int,
    hi: int,
    at_hi: int,
    out: dict[int, int],
) -> None:
    """Fill ``out[bit] = depth`` for backends holding block ``lo`` but not block ``hi``;
    somebody must (``at_lo != at_hi``), and every step keeps it so.

    A half where nobody leaves is not descended into, and the right half is walked in this
    call's loop: a recursion only where both halves hold a departure (with one holder, none;
    a call a level cost about what the probe itself does)."""
    while True:
        if hi == lo + 1:
            left = at_lo & ~at_hi
            while left:
                bit = left & -left
                out[bit] = hi
                left ^= bit
            return
        mid = (lo + hi) // 2
        at_mid = holders.get(hashes[mid], 0)
        if at_mid != at_lo and at_mid != at_hi:  # departures on both sides
            _bisect_depths(holders, hashes, lo, at_lo, mid, at_mid, out)
        if at_mid == at_hi:  # ...or on the left only
            hi, at_hi = mid, at_mid
        else:
            lo, at_lo = mid, at_mid
