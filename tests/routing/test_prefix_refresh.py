"""Issue 16: a prefix index with ``refresh_s`` skips re-stamping a chain stamped that recently.

Its answers stay within the exact index's at the same moment and at ``refresh_s`` later: every
block's time is at most ``refresh_s`` older than the exact index's, and chains stay
prefix-closed (times never increase along one).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from routing.policies import build_router
from routing.prefix_index import PrefixIndex


def chain(n: int, start: int = 1) -> tuple[int, ...]:
    return tuple(range(start, start + n))


def test_a_fresh_chain_is_left_alone_and_new_blocks_take_its_time() -> None:
    index = PrefixIndex(block_tokens=1, ttl_s=10.0, refresh_s=1.0)
    index.record("a", chain(4), now=0.0)
    index.record("a", chain(4), now=0.5)  # fresh: nothing written
    index.record("a", chain(6), now=0.9)  # two new blocks, stamped 0.0 like the rest
    assert index.memory_report().entries == 6
    assert index.longest_cached_prefix("a", chain(6), now=10.0) == 6
    assert index.longest_cached_prefix("a", chain(6), now=10.1) == 0
    index.record("a", chain(6), now=1.5)  # 1.5 s old: the whole chain is stamped again
    assert index.longest_cached_prefix("a", chain(6), now=11.4) == 6
    exact = PrefixIndex(block_tokens=1, ttl_s=10.0)
    exact.record("a", chain(4), now=0.0)
    exact.record("a", chain(4), now=0.5)
    assert exact.longest_cached_prefix("a", chain(4), now=10.2) == 4


def test_refresh_must_be_below_the_ttl() -> None:
    with pytest.raises(ValueError):
        PrefixIndex(ttl_s=5.0, refresh_s=5.0)
    with pytest.raises(ValueError):
        PrefixIndex(refresh_s=-1.0)
    short = build_router("predicted_ttft", {"prefix_ttl_s": 2.0, "prefix_refresh_s": 5.0}, 0)
    assert short.scorer.index.refresh_s == 0.2  # type: ignore[attr-defined]  # a tenth of it
    assert build_router("predicted_ttft").scorer.index.refresh_s == 1.0  # type: ignore[attr-defined]


records = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 2), st.integers(1, 12), st.floats(0, 50)),
    max_size=30,
)


@given(records, st.integers(0, 2), st.floats(0, 90), st.sampled_from([0.5, 2.0, 7.0]))
def test_answers_lie_between_the_exact_index_now_and_refresh_s_later(
    recorded: list[tuple[str, int, int, float]], family: int, now: float, refresh_s: float
) -> None:
    loose = PrefixIndex(block_tokens=16, ttl_s=30.0, refresh_s=refresh_s)
    exact = PrefixIndex(block_tokens=16, ttl_s=30.0)
    for backend, fam, length, at in sorted(recorded, key=lambda r: r[3]):
        loose.record(backend, chain(length, start=fam * 1000), now=at)
        exact.record(backend, chain(length, start=fam * 1000), now=at)
    query = chain(12, start=family * 1000)
    got = loose.cached_tokens(query, now)
    upper, lower = exact.cached_tokens(query, now), exact.cached_tokens(query, now + refresh_s)
    for backend in "abc":
        tokens = got.get(backend, 0)
        assert lower.get(backend, 0) <= tokens <= upper.get(backend, 0)
        assert tokens == loose.longest_cached_prefix(backend, query, now)
    assert loose.memory_report().entries == exact.memory_report().entries
