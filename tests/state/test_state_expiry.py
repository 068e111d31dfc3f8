"""The in-memory store (the host coordinator of ``--workers``; the tests' stand-in for Redis)
and a replica's local view free what has outlived its TTL, as Redis's key expiry and trims do
there: after the TTLs every structure is back to empty, on an injected clock (issue 19: nothing
kept per backend, lease or bucket for ever)."""

from __future__ import annotations

import pytest

from gateway.state.memory import MemoryStore
from gateway.state.records import Ejection, SignalRecord, WriteBatch
from gateway.state.store import Retention
from gateway.state.view import SharedView


class Wall:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


EMPTY = {
    "in_flight_replicas": 0,
    "prefix_backends": 0,
    "prefix_blocks": 0,
    "signals": 0,
    "ejections": 0,
    "leases": 0,
    "token_buckets": 0,
}


async def test_every_structure_returns_to_empty_after_its_ttl() -> None:
    wall = Wall()
    keep = Retention(prefix_ttl_s=10.0, signal_ttl_s=5.0, ejection_ttl_s=20.0, in_flight_ttl_s=2.0)
    store = MemoryStore(keep, wall=wall)
    now = wall.now
    for n in range(50):  # backends that are served once and never again
        await store.push(
            WriteBatch(
                replica=f"r{n % 3}",
                at=now,
                in_flight={f"b{n}": 1},
                prefix={f"b{n}": {h: now for h in range(100)}},
                signals={f"b{n}": SignalRecord(at=now, source="r", values={"rtt_ms": 1.0})},
                ejections={f"b{n}": Ejection(until=now + 5, at=now, count=1, reason="5xx")},
            )
        )
        assert await store.try_lease(f"probe:b{n}", "r0", ttl_s=3.0)
        await store.take_tokens(f"tenant:{n}", rate_per_s=1.0, burst=4.0, cost=2.0)
    held = store.held()
    assert held["prefix_blocks"] == 5000 and held["token_buckets"] == 50 and held["leases"] == 50
    wall.now += 1.0
    await store.pull(0.0, wall.now)
    assert store.held()["prefix_blocks"] == 5000  # nothing has expired yet
    assert store.held()["token_buckets"] == 50  # 2 of 4 tokens back at 1 a second: not full
    wall.now += 21.0  # past every TTL and every refill
    await store.pull(0.0, wall.now)
    assert store.held() == EMPTY


async def test_a_refilled_bucket_is_dropped_and_starts_full_again() -> None:
    wall = Wall()
    store = MemoryStore(wall=wall)
    assert (await store.take_tokens("k", rate_per_s=1.0, burst=2.0, cost=2.0)).allowed
    assert not (await store.take_tokens("k", rate_per_s=1.0, burst=2.0, cost=1.0)).allowed
    wall.now += 1.5
    await store.pull(0.0, wall.now)
    assert store.held()["token_buckets"] == 1  # 1.5 of 2 back: the bucket still matters
    wall.now += 0.5  # refilled now, but the last pass over the buckets was 0.5 s ago
    await store.pull(0.0, wall.now)
    assert store.held()["token_buckets"] == 1  # one pass a second, however many pulls
    wall.now += 0.5
    await store.pull(0.0, wall.now)
    assert store.held()["token_buckets"] == 0
    result = await store.take_tokens("k", rate_per_s=1.0, burst=2.0, cost=2.0)
    assert result.allowed and result.tokens_left == pytest.approx(0.0)


async def test_a_lease_being_renewed_and_a_backend_still_served_stay() -> None:
    wall = Wall()
    store = MemoryStore(Retention(prefix_ttl_s=10.0), wall=wall)
    for _ in range(5):
        assert await store.try_lease("probe:a", "r0", ttl_s=3.0)
        await store.push(WriteBatch("r0", wall.now, prefix={"a": {int(wall.now): wall.now}}))
        wall.now += 2.5
        await store.pull(0.0, wall.now)
    held = store.held()
    assert held["leases"] == 1 and held["prefix_backends"] == 1
    assert held["prefix_blocks"] == 4  # the 5th of 5 blocks is 12.5 s old: only it expired


async def test_take_tokens_refuses_a_zero_rate_as_redis_does() -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        await MemoryStore().take_tokens("k", rate_per_s=0.0, burst=1.0)


def test_the_local_view_forgets_backends_whose_blocks_all_expired() -> None:
    view = SharedView("me", Retention(prefix_ttl_s=10.0))
    for n in range(20):
        view.add_prefix(f"b{n}", [1, 2, 3], now=100.0)
    view.add_prefix("b0", [4], now=105.0)
    view.prune(now=112.0)
    assert view.prefix_sizes() == {"b0": 1}
    view.prune(now=116.0)
    assert view.prefix_sizes() == {}
