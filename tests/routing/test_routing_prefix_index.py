from __future__ import annotations

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from routing.prefix import block_hashes, tenant_seed
from routing.prefix_index import PrefixIndex


def _reference_hashes(canonical: bytes, tenant: str, block_tokens: int) -> tuple[int, ...]:
    """The original memoryview implementation: the optimized one must give the same values."""
    size, seed, out = block_tokens * 4, tenant_seed(tenant), []
    view = memoryview(canonical)
    for start in range(0, len(canonical) - size + 1, size):
        seed = xxhash.xxh3_64_intdigest(view[start : start + size], seed)
        out.append(seed)
    return tuple(out)


@given(st.binary(max_size=600), st.sampled_from([1, 4, 16]))
def test_block_hashes_unchanged_by_optimization(data: bytes, block_tokens: int) -> None:
    assert block_hashes(data, "t", block_tokens) == _reference_hashes(data, "t", block_tokens)


def chain(n: int, start: int = 1) -> tuple[int, ...]:
    return tuple(range(start, start + n))


def test_longest_prefix_counts_leading_blocks_only() -> None:
    index = PrefixIndex(block_tokens=16)
    index.record("a", chain(5), now=0.0)
    assert index.longest_cached_prefix("a", chain(8), now=1.0) == 5 * 16
    assert index.longest_cached_prefix("a", (99, *chain(4, start=200)), now=1.0) == 0
    assert index.longest_cached_prefix("b", chain(5), now=1.0) == 0
    assert index.longest_cached_prefix("a", (), now=1.0) == 0
    assert index.cached_tokens((), now=1.0) == {}
    assert index.cached_tokens((42,), now=1.0) == {}


def test_entries_expire_after_ttl_and_refresh_on_record() -> None:
    index = PrefixIndex(block_tokens=16, ttl_s=10.0)
    index.record("a", chain(4), now=0.0)
    index.record("a", chain(2), now=8.0)  # shared system prompt reused: its blocks refresh
    assert index.longest_cached_prefix("a", chain(4), now=9.0) == 64
    assert index.longest_cached_prefix("a", chain(4), now=15.0) == 32
    assert index.cached_tokens(chain(4), now=15.0) == {"a": 32}
    assert index.cached_tokens(chain(4), now=30.0) == {}
    assert index.purge(now=30.0) == 4
    assert index.memory_report().entries == 0 and index.memory_report().expired == 4


def test_bulk_lookup_finds_each_backend_depth() -> None:
    index = PrefixIndex(block_tokens=10)
    index.record("a", chain(10), now=0.0)
    index.record("b", chain(3), now=0.0)
    index.record("c", chain(7), now=0.0)
    index.record("d", chain(3, start=100), now=0.0)
    assert index.cached_tokens(chain(12), now=1.0) == {"a": 100, "b": 30, "c": 70}


def test_per_backend_bound_evicts_oldest_and_keeps_chains_prefix_closed() -> None:
    index = PrefixIndex(block_tokens=1, max_entries_per_backend=8, max_entries_total=100)
    index.record("a", chain(6, start=1), now=0.0)
    index.record("a", chain(6, start=100), now=1.0)
    report = index.memory_report()
    assert report.per_backend["a"] <= 8 and report.evicted > 0
    assert index.longest_cached_prefix("a", chain(6, start=100), now=2.0) == 6
    assert index.entries("a") == report.per_backend["a"] and index.entries("zz") == 0


def test_global_bound_shrinks_every_backend() -> None:
    index = PrefixIndex(block_tokens=1, max_entries_per_backend=10, max_entries_total=12)
    index.record("a", chain(8, start=1), now=0.0)
    index.record("b", chain(8, start=100), now=1.0)
    report = index.memory_report()
    assert (
        report.entries <= 12
        and report.approx_bytes > 0
        and report.distinct_blocks == report.entries
    )


def test_shrink_drops_expired_first() -> None:
    index = PrefixIndex(block_tokens=1, ttl_s=5.0, max_entries_per_backend=4, max_entries_total=100)
    index.record("a", chain(3, start=1), now=0.0)
    index.record("a", chain(3, start=50), now=10.0)
    assert index.memory_report().expired == 3 and index.entries("a") == 3


def test_forget_removes_a_backend() -> None:
    index = PrefixIndex()
    index.record("a", chain(3), now=0.0)
    index.record("b", chain(3), now=0.0)
    index.forget("a")
    index.forget("never-seen")
    assert index.cached_tokens(chain(3), now=1.0) == {"b": 48}
    index.record("a", (), now=2.0)
    assert index.memory_report().entries == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"block_tokens": 0},
        {"ttl_s": 0},
        {"max_entries_per_backend": 0},
        {"max_entries_per_backend": 5, "max_entries_total": 4},
    ],
)
def test_invalid_bounds_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PrefixIndex(**kwargs)  # type: ignore[arg-type]


@given(
    st.lists(
        st.tuples(
            st.sampled_from("abcde"), st.integers(0, 3), st.integers(1, 12), st.floats(0, 50)
        ),
        max_size=25,
    ),
    st.integers(0, 3),
    st.floats(0, 80),
)
def test_bulk_lookup_agrees_with_per_backend_lookup(records, query_family, now) -> None:
    index = PrefixIndex(
        block_tokens=16, ttl_s=30.0, max_entries_per_backend=20, max_entries_total=60
    )
    for backend, family, length, at in sorted(records, key=lambda r: r[3]):
        index.record(backend, chain(length, start=family * 1000), now=at)
    query = chain(12, start=query_family * 1000)
    bulk = index.cached_tokens(query, now)
    for backend in "abcde":
        assert bulk.get(backend, 0) == index.longest_cached_prefix(backend, query, now)


def test_non_chain_input_cannot_corrupt_the_index() -> None:
    index = PrefixIndex(block_tokens=1)
    index.record("a", (5,), now=0.0)
    index.record("a", (1, 5), now=0.0)  # not a real chain: block 5 cannot follow block 1
    index.forget("a")
    assert index.memory_report().entries == 0 and index.memory_report().distinct_blocks == 0


def test_merge_keeps_the_newer_time_skips_expired_and_bounds_memory() -> None:
    index = PrefixIndex(block_tokens=16, ttl_s=100.0, max_entries_per_backend=8,
                        max_entries_total=8)  # fmt: skip
    index.record("a", chain(3), now=50.0)
    # Remote sets need not be chains; older news does not roll a block back in time.
    assert index.merge("a", {1: 10.0, 2: 80.0, 9: 70.0}, now=90.0) == 2
    assert index.merge("a", {9: 60.0, 5: -20.0}, now=90.0) == 0  # older; expired
    assert index.merge("a", {4: 500.0}, now=90.0) == 1  # from the future: counted as now
    # Block 1 expired; 2 and 4 (newer) stay: sets that are not whole chains read approximately.
    assert index.longest_cached_prefix("a", chain(4), now=151.0) < 4 * 16
    assert index.longest_cached_prefix("a", chain(4), now=149.0) == 4 * 16
    assert index.merge("b", {7: -50.0}, now=90.0) == 0 and index.entries("b") == 0
    assert index.merge("b", {2: 85.0}, now=90.0) == 1  # a block "a" holds too
    index.merge("b", {k: 90.0 for k in range(100, 110)}, now=90.0)
    report = index.memory_report()
    assert report.entries <= 8 and report.per_backend["b"] <= 8
    assert index.cached_tokens((100,), now=91.0).get("b", 0) in (0, 16)


def _sweep(index: PrefixIndex, now: float, max_scan: int) -> tuple[int, int]:
    """Steps until a round ends; returns (steps taken, entries removed)."""
    steps = removed = 0
    while True:
        progress = index.purge_step(now, max_scan)
        assert progress.scanned <= max_scan
        steps, removed = steps + 1, removed + progress.removed
        if progress.round_done:
            return steps, removed


@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.integers(1, 30), st.integers(0, 40)), max_size=25
    ),
    st.integers(1, 50),
)
def test_stepwise_purge_removes_exactly_what_a_full_purge_removes(
    records: list[tuple[str, int, int]], max_scan: int
) -> None:
    stepwise, whole = PrefixIndex(ttl_s=10.0), PrefixIndex(ttl_s=10.0)
    for backend, length, at in records:
        for index in (stepwise, whole):
            index.record(backend, chain(length, start=at * 7), now=float(at))
    _, removed = _sweep(stepwise, 45.0, max_scan)
    assert removed == whole.purge(45.0)
    assert stepwise.memory_report() == whole.memory_report()
    for backend in "abc":
        assert stepwise.entries(backend) == whole.entries(backend)


def test_purge_steps_are_bounded_and_a_round_ends() -> None:
    index = PrefixIndex(ttl_s=10.0)
    index.record("a", chain(100), now=0.0)
    index.record("b", chain(50, start=1000), now=0.0)
    steps, removed = _sweep(index, 20.0, 40)
    assert removed == 150 and steps >= 150 // 40
    assert index.memory_report().entries == 0 and index.memory_report().per_backend == {}
    assert index.memory_report().expired == 150
    # The next step begins a new round over an empty index and ends it at once.
    assert index.purge_step(20.0, 40).round_done


def test_sweep_keeps_blocks_refreshed_after_its_snapshot_and_skips_forgotten_backends() -> None:
    index = PrefixIndex(ttl_s=10.0)
    index.record("a", chain(10), now=0.0)
    index.record("b", chain(10, start=100), now=0.0)
    first = index.purge_step(20.0, 3)  # snapshot taken; one backend partly scanned
    assert not first.round_done and first.removed == 3
    index.record("a", chain(10), now=19.0)  # refreshed: must survive the rest of the round
    index.record("b", chain(10, start=100), now=19.0)
    index.forget("b")
    _sweep(index, 20.0, 3)
    surviving = index.entries("a") + index.entries("b")
    assert surviving == index.memory_report().entries
    assert index.entries("b") == 0
    assert index.longest_cached_prefix("a", chain(10), now=20.0) == 10 * 16


def test_purge_step_needs_a_positive_budget() -> None:
    with pytest.raises(ValueError):
        PrefixIndex().purge_step(0.0, 0)


@pytest.mark.parametrize(
    ("policy", "ttl"), [("predicted_ttft", "prefix_ttl_s"), ("cache_aware", "tree_ttl_s")]
)
def test_routers_with_an_index_sweep_it(policy: str, ttl: str) -> None:
    from routing.policies import build_router

    router = build_router(policy, {ttl: 1.0})
    index = router.scorer.index  # type: ignore[attr-defined]
    index.record("a", chain(4), now=0.0)
    progress = router.purge_step(5.0, 100)
    assert (progress.removed, progress.entries, progress.round_done) == (4, 0, True)


def test_a_router_without_an_index_has_nothing_to_sweep() -> None:
    from routing.policies import build_router

    progress = build_router("round_robin").purge_step(5.0, 100)
    assert (progress.scanned, progress.removed, progress.round_done) == (0, 0, True)
