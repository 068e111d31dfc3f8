"""Eviction order of the engine's prefix cache: tail blocks go first, as in vLLM."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loadtests.emulator.prefix_cache import PrefixCache


def test_a_chain_longer_than_the_cache_keeps_its_head() -> None:
    cache = PrefixCache(4)
    cache.insert(tuple(range(1, 7)))  # 6 blocks, 4 fit: the tail (5, 6) is evicted
    assert cache.peek(tuple(range(1, 7))) == 4
    assert 5 not in cache and 6 not in cache


def test_a_chain_survives_partial_eviction_from_its_tail() -> None:
    cache = PrefixCache(6)
    old, new = (1, 2, 3, 4), (10, 11, 12, 13)
    cache.insert(old)
    cache.insert(new)  # 8 blocks into 6: two of the old chain go, from its tail
    assert cache.match(old) == 2  # head blocks 1 and 2 are still a usable prefix
    assert 3 not in cache and 4 not in cache
    cache.insert((20, 21))  # the new chain is now least recently used: its tail goes
    assert cache.peek(new) == 2 and cache.peek(old) == 2


def test_match_touches_only_the_matched_blocks_and_leaves_the_head_last_to_go() -> None:
    cache = PrefixCache(5)
    cache.insert((1, 2, 3))
    cache.insert((7, 8))
    assert cache.match((1, 2, 9)) == 2  # touches 2 then 1; block 3 stays least recent
    cache.insert((30,))
    assert 3 not in cache and cache.peek((1, 2)) == 2 and cache.peek((7, 8)) == 2
    cache.insert((31, 32))  # next to go: chain (7, 8), tail first
    assert cache.peek((7, 8)) == 0 and 7 not in cache and cache.peek((1, 2)) == 2


def test_peek_leaves_the_eviction_order_alone() -> None:
    peeked, untouched = PrefixCache(4), PrefixCache(4)
    for cache in (peeked, untouched):
        cache.insert((1, 2, 3))
    assert peeked.peek((1, 2, 3)) == 3
    for cache in (peeked, untouched):
        cache.insert((7, 8))
    assert [b in peeked for b in (1, 2, 3, 7, 8)] == [b in untouched for b in (1, 2, 3, 7, 8)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=12, unique=True), max_size=30),
    st.integers(1, 16),
)
def test_bounded_and_every_cached_chain_is_a_prefix(chains: list[list[int]], capacity: int) -> None:
    """Whatever the traffic, the cache never exceeds its capacity, and after inserting a chain
    the cached part of it is a prefix (no usable-looking tail without its head)."""
    cache = PrefixCache(capacity)
    for chain in chains:
        cache.insert(chain)
        assert len(cache) <= capacity
        kept = cache.peek(chain)
        assert kept == min(len(chain), capacity)
        assert not any(block in cache for block in chain[kept:])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.lists(st.integers(0, 30), min_size=1, max_size=10)),
        max_size=30,
    ),
    st.integers(1, 20),
)
def test_the_lru_order_is_every_block_touched_tail_first(
    calls: list[tuple[bool, list[int]]], capacity: int
) -> None:
    """Against a plain model of the LRU (each block moved to the most recent end, tail to
    head, oldest evicted): the same blocks, in the same order, after inserts and matches."""
    cache, model = PrefixCache(capacity), list[int]()
    for matching, chain in calls:
        if matching:
            touched = chain[: cache.match(chain)]
        else:
            cache.insert(chain)
            touched = chain
        for block in reversed(touched):
            if block in model:
                model.remove(block)
            model.append(block)
        del model[: max(0, len(model) - capacity)]
        assert list(cache._blocks) == model
