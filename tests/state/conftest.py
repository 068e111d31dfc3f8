"""Fixtures for the shared-state tests: real redis-server processes (standalone and a
3-master cluster) and stores of every kind behind one factory."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.state.config import StateConfig
from gateway.state.connect import open_store
from gateway.state.memory import MemoryStore
from gateway.state.store import StateStore
from gateway.state.sync import SharedStateSync
from tests.redis_server import RedisClusterServers, RedisServer
from tests.servers import settle

STORE_KINDS = ["memory", "redis", "redis-cluster"]


def fast_config(kind: str, where: Any = None, **overrides: Any) -> StateConfig:
    """A config with short intervals and bounds so tests finish quickly. ``where`` is a
    RedisServer, a RedisClusterServers, or None (memory)."""
    data: dict[str, Any] = {
        "backend": kind,
        "key_prefix": f"t{uuid.uuid4().hex[:10]}",
        "timeouts": {"op_s": 0.2, "connect_s": 0.3, "breaker_failures": 2, "breaker_reset_s": 0.3},
        "intervals": {
            "flush_s": 0.02,
            "refresh_s": 0.3,
            "lease_period_s": 1.2,
            "in_flight_ttl_s": 1.0,
        },
        "bounds": {"prefix_ttl_s": 60.0, "prefix_blocks_per_backend": 1000},
    }
    if kind == "redis":
        data["url"] = where.url
    elif kind == "redis-cluster":
        data["urls"] = where.urls
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return StateConfig.model_validate(data)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    with RedisClusterServers(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


def where_for(kind: str, request: pytest.FixtureRequest) -> Any:
    if kind == "redis":
        return request.getfixturevalue("redis_server")
    if kind == "redis-cluster":
        return request.getfixturevalue("redis_cluster")
    return None


ConfigFactory = Callable[..., StateConfig]
StoreFactory = Callable[..., Awaitable[StateStore]]


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_config(store_kind: str, request: pytest.FixtureRequest) -> ConfigFactory:
    """Configs for one shared deployment (same key prefix) of the parametrized kind."""
    where = where_for(store_kind, request)
    prefix = f"t{uuid.uuid4().hex[:10]}"

    def make(**overrides: Any) -> StateConfig:
        return fast_config(store_kind, where, key_prefix=prefix, **overrides)

    return make


@pytest.fixture
async def make_store(make_config: ConfigFactory) -> AsyncIterator[StoreFactory]:
    """New connections to one shared store (for memory: the same instance, as two replicas
    in one process would share it)."""
    opened: list[StateStore] = []
    shared_memory: dict[str, MemoryStore] = {}

    async def make(wall: Callable[[], float] = time.time, **overrides: Any) -> StateStore:
        # Semantics, not latency, are under test here: a cluster client's first call also
        # loads the slot map, which can take longer than 0.2 s on two busy cores (and a
        # connect longer than 0.3 s).
        overrides.setdefault("timeouts", {"op_s": 5.0, "connect_s": 5.0})
        config = make_config(**overrides)
        if config.backend == "memory":
            key = repr((sorted(overrides.items()), id(wall)))
            if key not in shared_memory:
                shared_memory[key] = open_store(config, wall)  # type: ignore[assignment]
            return shared_memory[key]
        store = open_store(config, wall)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


SyncFactory = Callable[..., Awaitable[SharedStateSync]]


@pytest.fixture
async def make_sync(
    make_config: ConfigFactory, make_store: StoreFactory
) -> AsyncIterator[SyncFactory]:
    """Started ``SharedStateSync`` replicas sharing one store; stopped at teardown."""
    running: list[SharedStateSync] = []

    async def make(replica_id: str, **overrides: Any) -> SharedStateSync:
        sync = SharedStateSync(
            await make_store(**overrides), make_config(**overrides), replica_id=replica_id
        )
        await sync.start()
        running.append(sync)
        return sync

    yield make
    for sync in running:
        await sync.stop()


# A ceiling for waits on conditions that come true in milliseconds: a busy machine cannot
# fail a test by its own timing; a test that reaches it has found a real hang.
SETTLE_S = 30.0


async def eventually(check: Callable[[], bool], within_s: float, step_s: float = 0.01) -> float:
    """Wait until ``check()`` holds; return how long it took (:func:`tests.servers.settle`)."""
    return await settle(check, within_s, step_s)
