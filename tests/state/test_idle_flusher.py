"""The flusher of an idle replica sleeps until something is written or its in-flight
heartbeat is due, instead of waking every ``flush_s`` to find nothing queued (a timer wake of
an idle gateway is most of its idle CPU). Real ``MemoryStore``; the test reads what the store
publishes to a subscriber, so it waits on events, never on time."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from gateway.state.memory import MemoryStore
from gateway.state.records import Ejection, WriteBatch
from gateway.state.sync import SharedStateSync
from tests.state.conftest import SETTLE_S, eventually, fast_config

# heartbeat every in_flight_ttl_s / 3 = 0.2 s: ten flush intervals of 20 ms
INTERVALS = {"flush_s": 0.02, "refresh_s": 0.3, "in_flight_ttl_s": 0.6}


async def _next_from(events: AsyncIterator[WriteBatch | None], replica: str) -> WriteBatch:
    async for batch in events:
        if batch is not None and batch.replica == replica:
            return batch
    raise AssertionError("the store ended the subscription")


async def test_an_idle_flusher_wakes_for_heartbeats_and_writes_only() -> None:
    store = MemoryStore()
    events = store.events()
    assert await anext(events) is None  # subscribed before the replica writes anything
    sync = SharedStateSync(store, fast_config("memory", intervals=INTERVALS), replica_id="r1")
    await sync.start()
    try:
        sync.note_in_flight("a1", +1)
        while (await _next_from(events, "r1")).in_flight != {"a1": 1}:
            pass
        ticks = sync.flush_ticks
        for _ in range(3):  # nothing written: only the heartbeat keeps the count alive
            assert (await _next_from(events, "r1")).in_flight == {"a1": 1}
        # At least 30 flush intervals went by; a flusher that sleeps while idle woke at most
        # twice per heartbeat (the heartbeat's push, and one tick if it parked too late).
        assert sync.flush_ticks - ticks <= 2 * 3 + 1
        sync.note_in_flight("a1", +1)  # a write wakes the sleeping flusher
        assert (await _next_from(events, "r1")).in_flight == {"a1": 2}
        ejection = Ejection(until=2e9, at=1e9, count=1, reason="timeouts")
        sync.note_ejection("b1", ejection)
        assert (await _next_from(events, "r1")).ejections == {"b1": ejection}
    finally:
        await sync.stop()


async def test_a_store_private_to_the_process_gets_no_flusher() -> None:
    # from_config with backend memory: a store no other replica can reach
    sync = SharedStateSync.from_config(fast_config("memory", intervals=INTERVALS))
    sync.contend(["probe:a1"])
    await sync.start()
    try:
        sync.note_in_flight("a1", +1)
        now = time.time()  # pruned after ejection_ttl_s: a current one
        sync.note_ejection("b1", Ejection(until=now + 30, at=now, count=1, reason="timeouts"))
        await eventually(lambda: sync.is_leader("probe:a1"), SETTLE_S)  # the lease loop runs
        start = sync.pulls
        await eventually(lambda: sync.pulls >= start + 3, SETTLE_S)  # and the refresh loop
        assert not sync.health().degraded
        assert sync.flush_ticks == 0
        assert sync.snapshot().in_flight("a1") == 1 and sync.snapshot().ejection("b1")
    finally:
        await sync.stop()
