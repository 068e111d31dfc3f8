"""Refreshes that skip the prefix blocks a subscriber already had as events, and the stores'
promise that makes it safe: a subscription that would lose a batch ends instead.

Real stores throughout: ``MemoryStore``, Redis (standalone and a cluster) through
``make_sync``, and the host coordinator (``HostStateServer``) on a Unix socket with
``HostStore`` clients, as the workers of ``meridian serve --workers N`` use it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path

import pytest

from gateway.state.health import HealthStatus
from gateway.state.host_server import HostStateServer
from gateway.state.memory import MemoryStore
from gateway.state.records import WriteBatch
from gateway.state.sync import SharedStateSync
from tests.state.conftest import SETTLE_S, SyncFactory, eventually, fast_config

QUEUE = 1024  # MemoryStore's per-subscriber queue


def _batch(replica: str, block: int) -> WriteBatch:
    return WriteBatch(replica=replica, at=1.0, in_flight=None, prefix={"a1": {block: 1.0}})


async def test_a_subscriber_that_falls_behind_is_ended_not_fed_a_gap() -> None:
    store = MemoryStore()
    behind = store.events()
    assert await anext(behind) is None  # subscribed
    for block in range(QUEUE + 1):  # one more than it can hold: one would be lost
        await store.push(_batch("w", block))
    with pytest.raises(StopAsyncIteration):
        await anext(behind)
    # a new subscription is whole again
    again = store.events()
    assert await anext(again) is None
    await store.push(_batch("w", 7))
    assert (await anext(again)) == _batch("w", 7)
    assert isinstance(again, AsyncGenerator)
    await again.aclose()


async def test_refreshes_skip_prefix_only_where_events_cannot_be_lost(
    make_sync: SyncFactory, store_kind: str
) -> None:
    sync = await make_sync("r1")  # refresh_s 0.3 in the tests' config
    await eventually(lambda: sync.health().status is HealthStatus.OK, SETTLE_S)
    await eventually(lambda: sync.health().events_live, SETTLE_S)
    start = sync.pulls
    await eventually(lambda: sync.pulls >= start + 4, SETTLE_S)
    if store_kind == "memory":
        # the first pull, and the one after it if the subscription came later: no more
        assert sync.prefix_pulls <= 2 < sync.pulls
    else:  # Redis pub/sub can resubscribe without a word: every refresh asks
        assert sync.prefix_pulls >= sync.pulls


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[HostStateServer]:
    server = HostStateServer(str(tmp_path / "state.sock"))
    await server.start()
    yield server
    await server.close()


async def _worker(path: str, replica: str) -> SharedStateSync:
    # Semantics, not latency, are under test (as in conftest's make_store): with the 0.2 s
    # op timeout a call on two busy cores timed out, and the reconnect's full pull was one
    # more prefix pull than the events leave room for.
    config = fast_config("host", url=f"unix://{path}", timeouts={"op_s": 5.0, "connect_s": 5.0})
    sync = SharedStateSync.from_config(config, replica_id=replica)
    await sync.start()
    return sync


async def test_workers_share_blocks_by_events_and_recover_by_a_full_pull(
    coordinator: HostStateServer,
) -> None:
    one = await _worker(coordinator.path, "w1")
    two = await _worker(coordinator.path, "w2")
    try:
        await eventually(lambda: two.health().events_live and one.health().events_live, SETTLE_S)
        one.note_prefix("a1", [1, 2, 3])
        await eventually(lambda: two.snapshot().cached_blocks("a1", [1, 2, 3]) == 3, SETTLE_S)
        start = two.pulls
        await eventually(lambda: two.pulls >= start + 4, SETTLE_S)
        assert two.prefix_pulls <= 2  # the blocks came as events; refreshes did not re-pull them
        one.note_prefix("a1", [1, 2, 3, 4])
        await eventually(lambda: two.snapshot().cached_blocks("a1", [1, 2, 3, 4]) == 4, SETTLE_S)

        # The coordinator goes away and comes back; what w1 writes meanwhile reaches w2
        # once both are back, by w2's full pull after its subscription broke.
        await coordinator.close()
        await eventually(lambda: not two.health().events_live, SETTLE_S)
        pulled = two.prefix_pulls
        one.note_prefix("b1", [9, 8])
        await coordinator.start()
        await eventually(lambda: two.snapshot().cached_blocks("b1", [9, 8]) == 2, SETTLE_S)
        await eventually(lambda: two.prefix_pulls > pulled, SETTLE_S)
    finally:
        await one.stop()
        await two.stop()
