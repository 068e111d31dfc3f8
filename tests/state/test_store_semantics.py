"""The StateStore contract, run unchanged against the in-memory store, a real standalone
redis-server and a real 3-master Redis Cluster."""

from __future__ import annotations

import asyncio
import time

from gateway.state.records import Ejection, SignalRecord, WriteBatch
from tests.state.conftest import SETTLE_S, StoreFactory


async def test_push_then_pull_round_trips_every_kind(make_store: StoreFactory) -> None:
    # A long in-flight TTL: the round trip is under test, not expiry (a busy cluster's first
    # push, which also loads the slot map, can take longer than the suite's 1 s TTL).
    writer = await make_store(intervals={"in_flight_ttl_s": 60.0})
    reader = await make_store(intervals={"in_flight_ttl_s": 60.0})
    now = time.time()
    await writer.push(
        WriteBatch(
            replica="r1",
            at=now,
            in_flight={"a1": 3, "b1": 0},
            prefix={"a1": {11: now, 2**64 - 1: now}, "b1": {7: now}},
            signals={"a1": SignalRecord(at=now, source="r1", values={"rtt_ms": 12.5})},
            ejections={"b1": Ejection(until=now + 30, at=now, count=2, reason="5xx")},
        )
    )
    pulled = await reader.pull(0.0, time.time())
    assert pulled.in_flight == {"r1": {"a1": 3, "b1": 0}}
    assert set(pulled.prefix["a1"]) == {11, 2**64 - 1}
    assert set(pulled.prefix["b1"]) == {7}
    assert pulled.signals["a1"].values == {"rtt_ms": 12.5}
    assert pulled.ejections["b1"].count == 2


async def test_pull_since_returns_only_recently_seen_blocks(make_store: StoreFactory) -> None:
    store = await make_store()
    now = time.time()
    await store.push(WriteBatch("r1", now, prefix={"a1": {1: now - 20, 2: now - 1}}))
    assert set((await store.pull(now - 5, now)).prefix["a1"]) == {2}
    assert set((await store.pull(0.0, now)).prefix["a1"]) == {1, 2}


async def test_prefix_index_is_bounded_and_expires(make_store: StoreFactory) -> None:
    store = await make_store(bounds={"prefix_blocks_per_backend": 16, "prefix_ttl_s": 10.0})
    now = time.time()
    await store.push(WriteBatch("r1", now, prefix={"a1": {h: now - 39.5 + h for h in range(40)}}))
    kept = (await store.pull(0.0, now)).prefix.get("a1", {})
    # Blocks 0..29 are older than the 10 s TTL; of the rest only the 16 newest fit, and
    # 30..39 are 10 blocks: all of them stay, nothing older does.
    assert set(kept) == set(range(30, 40))
    await store.push(WriteBatch("r1", now, prefix={"a1": {100 + h: now for h in range(30)}}))
    assert len((await store.pull(0.0, now)).prefix["a1"]) == 16


async def test_in_flight_of_a_silent_replica_expires(make_store: StoreFactory) -> None:
    # The store's clock is stepped, not waited on: "still live" must not depend on how fast a
    # busy machine gets from the push to the pull.
    clock = [time.time()]
    store = await make_store(intervals={"in_flight_ttl_s": 10.0}, wall=lambda: clock[0])
    start = clock[0]
    await store.push(WriteBatch("dead", start, in_flight={"a1": 5}))
    await store.push(WriteBatch("alive", start, in_flight={"a1": 1}))
    assert set((await store.pull(0.0, start)).in_flight) == {"dead", "alive"}
    clock[0] = start + 11.0  # past the TTL for "dead"; "alive" pushes again
    await store.push(WriteBatch("alive", clock[0], in_flight={"a1": 1}))
    assert (await store.pull(0.0, clock[0])).in_flight == {"alive": {"a1": 1}}


async def test_forget_replica_drops_its_counts_now(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.push(WriteBatch("r1", time.time(), in_flight={"a1": 5}))
    await store.forget_replica("r1")
    assert (await store.pull(0.0, time.time())).in_flight == {}


async def test_stale_signals_and_ejections_are_ignored(make_store: StoreFactory) -> None:
    store = await make_store(bounds={"signal_ttl_s": 5.0, "ejection_ttl_s": 5.0})
    now = time.time()
    await store.push(
        WriteBatch(
            "r1",
            now,
            signals={
                "old": SignalRecord(at=now - 10, source="r1"),
                "new": SignalRecord(at=now, source="r1", healthy=False),
            },
            ejections={"old": Ejection(until=now, at=now - 10)},
        )
    )
    pulled = await store.pull(0.0, now)
    assert set(pulled.signals) == {"new"}
    assert pulled.signals["new"].healthy is False
    assert pulled.ejections == {}


async def test_lease_has_one_holder_until_released_or_expired(make_store: StoreFactory) -> None:
    one, two = await make_store(), await make_store()
    for store in (one, two):  # connect (and load a cluster's slot map) before the 0.3 s clock
        await store.summary()
    # One holder: leases no busy machine's pause outlives (a 0.3 s one could lapse between
    # two calls, and the second holder's try would rightly win)
    assert await one.try_lease("probe:a", "r1", SETTLE_S)
    assert not await two.try_lease("probe:a", "r2", SETTLE_S)
    assert await one.try_lease("probe:a", "r1", SETTLE_S)  # extend
    assert not await two.release_lease("probe:a", "r2")  # not the holder: no effect
    assert await one.release_lease("probe:a", "r1")
    assert await two.try_lease("probe:a", "r2", 0.3)
    # r2 stops renewing: the lease lapses, and r1 gets it at a try after that.
    began = time.monotonic()
    while not await one.try_lease("probe:a", "r1", 0.3):
        assert time.monotonic() - began < SETTLE_S, "the lease never lapsed"
        await asyncio.sleep(0.02)
    assert (await one.summary()).leases.get("probe:a") == "r1"


async def test_token_bucket_allows_burst_then_refuses(make_store: StoreFactory) -> None:
    store = await make_store()
    results = [await store.take_tokens("tenant:x", rate_per_s=0.01, burst=5) for _ in range(7)]
    assert [r.allowed for r in results] == [True] * 5 + [False] * 2
    assert results[-1].retry_after_s > 10
    refill = await store.take_tokens("tenant:y", rate_per_s=1000, burst=1)
    assert refill.allowed
    await asyncio.sleep(0.01)
    assert (await store.take_tokens("tenant:y", rate_per_s=1000, burst=1)).allowed


async def test_token_bucket_is_atomic_under_concurrency(make_store: StoreFactory) -> None:
    # Generous timeouts: 90 concurrent scripts on 2 busy cores are the point, not latency (a
    # cluster client's first call connects to every node and loads the slot map: 3 s was
    # once not enough with the machine at load 8).
    clients = [await make_store(timeouts={"op_s": 10.0, "connect_s": 30.0}) for _ in range(3)]
    for client in clients:  # connect (and load the cluster slot map) before the race
        await client.take_tokens("warm-up", rate_per_s=1, burst=1)
    takes = [
        client.take_tokens("shared", rate_per_s=0.001, burst=40)
        for client in clients
        for _ in range(30)
    ]
    results = await asyncio.gather(*takes)
    assert sum(r.allowed for r in results) == 40


async def test_pushed_batches_reach_subscribers(make_store: StoreFactory) -> None:
    writer, reader = await make_store(), await make_store()
    received: asyncio.Queue[WriteBatch] = asyncio.Queue()
    subscribed = asyncio.Event()

    async def listen() -> None:
        async for batch in reader.events():
            subscribed.set()
            if batch is not None:
                await received.put(batch)

    listener = asyncio.create_task(listen())
    try:
        await asyncio.wait_for(subscribed.wait(), SETTLE_S)
        await writer.push(WriteBatch("r1", time.time(), prefix={"a1": {42: time.time()}}))
        batch = await asyncio.wait_for(received.get(), SETTLE_S)
        assert batch.replica == "r1" and 42 in batch.prefix["a1"]
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)


async def test_summary_counts_what_is_stored(make_store: StoreFactory) -> None:
    store = await make_store()
    now = time.time()
    await store.push(
        WriteBatch("r1", now, in_flight={"a1": 2}, prefix={"a1": {1: now, 2: now}, "b1": {3: now}})
    )
    await store.push(WriteBatch("r2", now, in_flight={"a1": 1}))
    await store.try_lease("probe:a1", "r1", 5.0)
    summary = await store.summary()
    assert summary.in_flight == {"a1": 3}
    assert summary.replicas == ("r1", "r2")
    assert summary.prefix_blocks == {"a1": 2, "b1": 1}
    assert summary.leases == {"probe:a1": "r1"}
