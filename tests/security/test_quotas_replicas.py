"""A key's quota held across two ``meridian serve`` processes sharing one real ``redis-server``:
the requests both admit stay within the limit plus one allowance per replica; with Redis gone,
quotas fail open to each replica's own limit, counted in ``meridian_quota_fail_open_total``.

Limit: burst 40 requests, refilling at 0.001 a second (a test's length adds under one token).
Allowance 0.1 x 40 = 4 requests, so the stated tolerance is 2 x 0.1 = 20 %: at most 48 (+1 for
the refill). Lower bound, once Redis' bucket holds under one token and each replica refuses:
at least 40 - 1 - 2 (each replica may keep under one token it cannot spend)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.server import start_emulated_backend
from tests.redis_server import RedisServer
from tests.replicas.support import FAST_ENGINE, Replica, serve, wait_for
from tests.security.auth_support import issue

MODEL = "quota-model"
BURST = 40
ALLOWANCE = 4  # quotas.allowance 0.1 of the burst
PREFIX = "quotatest"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


def _config(backend_url: str, redis_url: str, key_entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "backends": [
            {"name": "b1", "region": "local", "url": backend_url + "/v1", "models": [MODEL]}
        ],
        "auth": {"mode": "keys", "keys": [key_entry]},
        "quotas": {"per_key": {"rps": 0.001, "burst": BURST}, "allowance": 0.1},
        "signals": {"probes": {"interval_s": 60}},
        "state": {
            "backend": "redis",
            "url": redis_url,
            "key_prefix": PREFIX,
            # Generous: a busy machine must not make Redis look away (that fails open).
            "timeouts": {"op_s": 5.0, "connect_s": 5.0, "breaker_reset_s": 0.3},
        },
    }


async def _post(session: aiohttp.ClientSession, replica: Replica, key: str) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(replica.url + "/v1/chat/completions", json=body, headers=headers) as r:
        await r.read()
        assert r.status in (200, 429), r.status
        return r.status


async def _metric(session: aiohttp.ClientSession, replica: Replica, name: str) -> float:
    async with session.get(replica.admin_url + "/metrics") as response:
        text = await response.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_two_replicas_hold_a_key_to_its_quota_and_fail_open_without_redis(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    issued = issue("acme")
    key_id = issued.entry["id"]
    backend = await start_emulated_backend(
        EmulatedBackendConfig(name="b1", models=[MODEL], engine=FAST_ENGINE)
    )
    redis = Redis.from_url(redis_server.url)
    bucket = f"{PREFIX}:tb:{{quota:key:{key_id}:requests}}"
    config = _config(backend.url, redis_server.url, issued.entry)
    admitted = {"gw1": 0, "gw2": 0}
    try:
        async with (
            serve(config, tmp_path, "gw1") as first,
            serve(config, tmp_path, "gw2") as second,
            aiohttp.ClientSession() as session,
        ):
            replicas = {"gw1": first, "gw2": second}

            async def client(n: int) -> None:  # eight at once, each to both replicas in turn
                for i in range(20):
                    name = ("gw1", "gw2")[(n + i) % 2]
                    if await _post(session, replicas[name], issued.key) == 200:
                        admitted[name] += 1

            await asyncio.gather(*(client(n) for n in range(8)))  # 160 asked, 4 x the limit

            async def store_dry() -> bool:
                # Each refusal makes its replica claim again; Redis empties, the locals spend.
                for name, replica in replicas.items():
                    while await _post(session, replica, issued.key) == 200:
                        admitted[name] += 1
                left = await redis.hget(bucket, "tokens")
                return left is not None and float(left) < 1.0

            await wait_for(store_dry, 30.0)
            for name, replica in replicas.items():  # what each still held, spent
                while await _post(session, replica, issued.key) == 200:
                    admitted[name] += 1
            for replica in replicas.values():
                assert await _metric(session, replica, "meridian_quota_fail_open_total") == 0
                assert await _metric(session, replica, "meridian_quota_claims_total") > 0
            total = sum(admitted.values())
            assert BURST - 3 <= total <= BURST + 2 * ALLOWANCE + 1, admitted
            assert min(admitted.values()) > 0  # both replicas served from the shared bucket

            redis_server.kill()
            alone = 0

            async def fails_open() -> bool:
                nonlocal alone
                if await _post(session, first, issued.key) == 200:
                    alone += 1
                return alone > 0

            await wait_for(fails_open, 30.0, step_s=0.02)
            for _ in range(BURST + 10):  # on its own limit now: one fresh bucket, no more
                if await _post(session, first, issued.key) == 200:
                    alone += 1
            assert alone == BURST
            assert await _metric(session, first, "meridian_quota_fail_open_total") == BURST
    finally:
        await redis.aclose()
        await backend.close()
