"""API keys at the gRPC door, and keys kept in Redis: created and revoked with ``meridian keys``
while two replicas run, each honouring the change within one refresh."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import grpc
import pytest

from gateway.auth.wiring import AUTH
from gateway.grpc.mount import GRPC_SERVER
from tests.gateway.support import FAST_ENGINE, config_for
from tests.redis_server import RedisServer
from tests.security.auth_support import CHAT, MODEL, grpc_call, issue, until
from tests.servers import EmulatorFactory, GatewayFactory, emulators, gateways

GRPC_LISTEN = {"host": "127.0.0.1", "port": 0, "grpc_port": 0}


@pytest.fixture
async def rig() -> AsyncIterator[tuple[EmulatorFactory, GatewayFactory]]:
    async with emulators(MODEL, FAST_ENGINE) as emulator, gateways() as gateway:
        yield emulator, gateway


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


async def test_grpc_door_needs_a_key_too(rig: tuple[EmulatorFactory, GatewayFactory]) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    good, elsewhere = issue("acme"), issue("acme", models=["another-model"])
    running = await gateway(
        config_for(
            {"b1": backend.url},
            listen=GRPC_LISTEN,
            auth={"mode": "keys", "keys": [good.entry, elsewhere.entry]},
        )
    )
    target = running.app[GRPC_SERVER].target
    tenant_claim = ("x-meridian-tenant", "someone-else")
    assert await grpc_call(target, (tenant_claim,)) == grpc.StatusCode.UNAUTHENTICATED
    bad = (("authorization", "Bearer mrd_aaaaaaaa_" + "x" * 32),)
    assert await grpc_call(target, bad) == grpc.StatusCode.UNAUTHENTICATED
    wrong_model = (("authorization", elsewhere.headers["Authorization"]),)
    assert await grpc_call(target, wrong_model) == grpc.StatusCode.PERMISSION_DENIED
    assert backend.stats.requests == 0
    ok = (("authorization", good.headers["Authorization"]), tenant_claim)
    assert await grpc_call(target, ok) == grpc.StatusCode.OK
    assert backend.stats.requests == 1


def _keys_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "keys", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


async def _status(url: str, key: str) -> int:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {key}"}
        async with session.post(url + "/v1/chat/completions", json=CHAT, headers=headers) as r:
            return r.status


async def test_redis_keys_are_created_and_revoked_across_replicas_without_restart(
    rig: tuple[EmulatorFactory, GatewayFactory], redis_server: RedisServer
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    config = config_for(
        {"b1": backend.url},
        auth={"mode": "keys", "refresh_s": 0.2},
        state={"backend": "redis", "url": redis_server.url, "key_prefix": "keystest"},
    )
    replicas = [await gateway(config), await gateway(config)]
    rings = [replica.app[AUTH].ring for replica in replicas]

    async def next_refresh_on_every_replica() -> None:
        # Two refreshes: one in flight now may have read Redis before the change.
        seen = [ring.generation for ring in rings]
        await until(lambda: all(r.generation >= g + 2 for r, g in zip(rings, seen, strict=True)))

    out = _keys_cli("create", "--tenant", "acme", "--redis-url", redis_server.url,
                    "--key-prefix", "keystest")  # fmt: skip
    key = next(line.split()[1] for line in out.splitlines() if line.startswith("key: "))
    key_id = key.split("_")[1]
    assert key not in _keys_cli("list", "--redis-url", redis_server.url, "--key-prefix", "keystest")
    await next_refresh_on_every_replica()
    assert [await _status(r.url, key) for r in replicas] == [200, 200]
    _keys_cli("revoke", key_id, "--redis-url", redis_server.url, "--key-prefix", "keystest")
    await next_refresh_on_every_replica()
    assert [await _status(r.url, key) for r in replicas] == [401, 401]
    raw = await _redis_dump(redis_server.url)
    assert key not in raw  # only the digest was ever stored


async def _redis_dump(url: str) -> str:
    from redis.asyncio import Redis

    async with Redis.from_url(url) as client:
        keys = await client.hgetall("keystest:auth:keys")
        revoked = await client.smembers("keystest:auth:revoked")
        return f"{keys} {revoked}"
