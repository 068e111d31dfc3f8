"""The engine's prefix cache: a bounded LRU of chained block hashes (its KV capacity)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    def __init__(self, capacity_blocks: int) -> None:
        self._capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    def match(self, hashes: Sequence[int]) -> int:
        """Number of leading blocks cached; those are touched (most recently used).

        Hashes are chained, so a miss ends the match even if later blocks are still cached.
        """
        matched = 0
        for block_hash in hashes:
            if block_hash not in self._blocks:
                break
            self._blocks.move_to_end(block_hash)
            matched += 1
        return matched

    def insert(self, hashes: Sequence[int]) -> None:
        for block_hash in hashes:
            self._blocks[block_hash] = None
            self._blocks.move_to_end(block_hash)
        while len(self._blocks) > self._capacity:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()
