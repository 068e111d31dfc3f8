"""Two SharedStateSync replicas sharing one store (memory, Redis, Redis Cluster): what one
writes on its request path the other sees within the pub/sub or refresh interval."""

from __future__ import annotations

import asyncio
import time

from gateway.state.health import HealthStatus
from gateway.state.records import Ejection, SignalRecord
from tests.state.conftest import SETTLE_S, SyncFactory, eventually

PROBE = "probe:region-a"


async def test_prefix_noted_on_one_replica_is_seen_by_the_other(make_sync: SyncFactory) -> None:
    # The periodic refresh (the safety net) is pushed out of the test's reach, so what the
    # other replica sees can only have come by pub/sub.
    no_refresh = {"intervals": {"refresh_s": 60.0}}
    one, two = await make_sync("r1", **no_refresh), await make_sync("r2", **no_refresh)
    await eventually(lambda: one.health().status is HealthStatus.OK, SETTLE_S)
    await eventually(lambda: two.health().events_live, SETTLE_S)
    hashes = [101, 102, 103, 104]
    one.note_prefix("a1", hashes)
    await eventually(lambda: two.snapshot().cached_blocks("a1", hashes) == 4, SETTLE_S)
    assert two.snapshot().cached_blocks("a1", [101, 102, 999, 104]) == 2
    assert two.snapshot().cached_blocks("b1", hashes) == 0


async def test_in_flight_counts_add_up_across_replicas(make_sync: SyncFactory) -> None:
    one, two = await make_sync("r1"), await make_sync("r2")
    for _ in range(3):
        one.note_in_flight("a1", +1)
    two.note_in_flight("a1", +2)
    two.note_in_flight("b1", +1)
    await eventually(lambda: one.snapshot().in_flight("a1") == 5, 2.0)
    await eventually(lambda: two.snapshot().in_flight("a1") == 5, 2.0)
    one.note_in_flight("a1", -3)
    await eventually(lambda: two.snapshot().in_flight_totals() == {"a1": 2, "b1": 1}, 2.0)


async def test_signals_and_ejections_propagate(make_sync: SyncFactory) -> None:
    one, two = await make_sync("r1"), await make_sync("r2")
    await eventually(lambda: not one.health().degraded and two.health().events_live, 3.0)
    now = time.time()
    one.note_signal("a1", SignalRecord(at=now, source="r1", values={"waiting": 4.0}))
    one.note_ejection("b1", Ejection(until=now + 30, at=now, count=1, reason="timeouts"))
    await eventually(lambda: two.snapshot().signal("a1") is not None, 2.0)
    await eventually(lambda: two.snapshot().ejection("b1") is not None, 2.0)
    assert two.snapshot().signals()["a1"].values["waiting"] == 4.0


async def test_one_leader_and_takeover_after_clean_stop(make_sync: SyncFactory) -> None:
    one, two = await make_sync("r1"), await make_sync("r2")
    for sync in (one, two):
        sync.contend([PROBE])
    # Healthy first: a degraded replica counts itself leader (every replica probes then).
    await eventually(lambda: not one.health().degraded and not two.health().degraded, SETTLE_S)
    await eventually(lambda: one.is_leader(PROBE) != two.is_leader(PROBE), SETTLE_S)
    for _ in range(50):  # over several renewal rounds: never two leaders at any look
        # Two only by design, while a replica is degraded (each probes then). None is allowed:
        # a renewal starved past the lease (load 8 did it) lapses it until the next round.
        leaders = one.is_leader(PROBE) + two.is_leader(PROBE)
        assert leaders <= 1 or one.health().degraded or two.health().degraded
        await asyncio.sleep(0.01)
    await eventually(lambda: one.is_leader(PROBE) != two.is_leader(PROBE), SETTLE_S)
    leader, follower = (one, two) if one.is_leader(PROBE) else (two, one)
    await leader.stop()  # releases the lease
    # The follower takes the released lease over (how fast is loadtests' business).
    await eventually(lambda: follower.is_leader(PROBE), SETTLE_S)
