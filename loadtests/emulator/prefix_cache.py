"""The engine's prefix cache: a bounded LRU of chained block hashes (its KV capacity).

Blocks are chained: block k is only usable if blocks 0..k-1 are, so a chain's head is worth
the most and its tail the least. vLLM frees a finished request's blocks tail first into its
LRU free queue, so the tail is evicted first and a partly evicted chain keeps a usable head.
This cache does the same: inserting or matching a chain touches its blocks from the tail to
the head, leaving the head most recently used. (Touching them head to tail would evict the
head first and kill the whole chain while its later blocks linger, unusable.)
"""

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

    def peek(self, hashes: Sequence[int]) -> int:
        """Number of leading blocks cached, without touching them (a read-only query)."""
        blocks = self._blocks
        matched = 0
        for block_hash in hashes:
            if block_hash not in blocks:
                break
            matched += 1
        return matched

    def match(self, hashes: Sequence[int]) -> int:
        """Number of leading blocks cached; those are touched, tail first.

        Hashes are chained, so a miss ends the match even if later blocks are still cached.
        """
        matched = self.peek(hashes)
        touch = self._blocks.move_to_end
        for k in range(matched - 1, -1, -1):
            touch(hashes[k])
        return matched

    def insert(self, hashes: Sequence[int]) -> None:
        """Cache a computed chain, touching it tail first; evict least recently used blocks."""
        blocks = self._blocks
        touch = blocks.move_to_end
        for block_hash in reversed(hashes):
            # A new block goes in at the end already; only a cached one needs moving there
            # (one dict operation a block: a prompt is 50-200 blocks, most of them cached).
            if block_hash in blocks:
                touch(block_hash)
            else:
                blocks[block_hash] = None
        while len(blocks) > self._capacity:
            blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()
