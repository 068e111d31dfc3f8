"""Quotas per key and tenant: 429 with Retry-After and x-ratelimit-* before any upstream call;
prompt tokens on arrival, completion tokens when known; bounded state. The accounting is checked
on the real limiter with an injected clock; the door on a real gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest

from gateway.errors import ApiError
from gateway.grpc.mount import GRPC_SERVER
from gateway.quota.config import QuotaConfig, QuotaLimits
from gateway.quota.limiter import Quotas
from tests.gateway.support import FAST_ENGINE, config_for
from tests.security.auth_support import CHAT, MODEL, grpc_call, issue
from tests.servers import EmulatorFactory, GatewayFactory, emulators, gateways


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def rig() -> AsyncIterator[tuple[EmulatorFactory, GatewayFactory]]:
    async with emulators(MODEL, FAST_ENGINE) as emulator, gateways() as gateway:
        yield emulator, gateway


def test_request_rate_refills_at_its_rate() -> None:
    clock = Clock()
    quotas = Quotas(QuotaConfig(per_key=QuotaLimits(rps=2, burst=2)), clock=clock)
    quotas.admit("k1", "t", 0)
    quotas.admit("k1", "t", 0)
    with pytest.raises(ApiError) as refused:
        quotas.admit("k1", "t", 0)
    assert refused.value.status == 429 and refused.value.code == "quota_exceeded"
    assert refused.value.retry_after_s == pytest.approx(0.5)
    headers = dict(refused.value.headers)
    assert headers["x-ratelimit-limit-requests"] == "2"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    quotas.admit("k2", "t", 0)  # another key has its own bucket
    clock.now += 0.5
    quotas.admit("k1", "t", 0)


def test_tokens_per_minute_counts_prompt_then_completion() -> None:
    clock = Clock()
    quotas = Quotas(QuotaConfig(per_tenant=QuotaLimits(tokens_per_minute=600)), clock=clock)
    quotas.admit(None, "acme", 300)
    quotas.charge(None, "acme", 250)  # 550 of 600 used
    with pytest.raises(ApiError) as refused:
        quotas.admit(None, "acme", 100)
    assert refused.value.retry_after_s == pytest.approx(5.0)  # 50 missing at 10 tokens/s
    assert dict(refused.value.headers)["x-ratelimit-remaining-tokens"] == "50"
    quotas.admit(None, "other", 100)  # tenants are separate
    clock.now += 5.0
    quotas.admit(None, "acme", 100)
    with pytest.raises(ApiError, match="whole per-minute quota"):
        quotas.admit(None, "acme", 601)


def test_a_refusal_takes_nothing_from_any_bucket() -> None:
    clock = Clock()
    config = QuotaConfig(
        per_key=QuotaLimits(rps=1, burst=5), per_tenant=QuotaLimits(rps=1, burst=1)
    )
    quotas = Quotas(config, clock=clock)
    quotas.admit("k1", "t", 0)
    for _ in range(3):
        with pytest.raises(ApiError):
            quotas.admit("k1", "t", 0)  # the tenant is out: the key's bucket is not charged
    clock.now += 1.0
    quotas.admit("k1", "t", 0)


def test_buckets_are_bounded_whatever_the_tenant_names() -> None:
    quotas = Quotas(QuotaConfig(per_tenant=QuotaLimits(rps=10), max_tracked=16), clock=Clock())
    for i in range(60_000):
        quotas.admit(None, f"rotating-{i}", 0)
    assert len(quotas) <= 16


async def test_quota_429_reaches_the_client_before_any_upstream_call(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    first, second = issue("acme"), issue("acme")
    running = await gateway(
        config_for(
            {"b1": backend.url},
            auth={"keys": [first.entry, second.entry]},
            # ~1 token a quarter hour: nothing refills while the test runs, however slow.
            quotas={
                "per_key": {"rps": 0.001, "burst": 2},
                "per_tenant": {"rps": 0.001, "burst": 3},
            },
        )
    )
    async with aiohttp.ClientSession() as session:
        statuses = []
        for key in (first, first, first, second, second):
            async with session.post(
                running.url + "/v1/chat/completions", json=CHAT, headers=key.headers
            ) as r:
                statuses.append(r.status)
                if r.status == 429:
                    body = await r.json()
                    assert body["error"]["code"] == "quota_exceeded"
                    assert int(r.headers["Retry-After"]) >= 1
                    assert "x-ratelimit-remaining-requests" in r.headers
                    assert "x-ratelimit-reset-requests" in r.headers
    # first: 2 of its own burst; then second shares the tenant's 3 with first's 2.
    assert statuses == [200, 200, 429, 200, 429]
    assert backend.stats.requests == 3


async def test_the_grpc_door_takes_from_the_same_quota(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    key = issue("acme")
    running = await gateway(
        config_for(
            {"b1": backend.url},
            listen={"host": "127.0.0.1", "port": 0, "grpc_port": 0},
            auth={"keys": [key.entry]},
            quotas={"per_key": {"rps": 0.001, "burst": 2}},
        )
    )
    metadata = (("authorization", key.headers["Authorization"]),)
    async with aiohttp.ClientSession() as session:
        async with session.post(
            running.url + "/v1/chat/completions", json=CHAT, headers=key.headers
        ) as r:
            assert r.status == 200
    target = running.app[GRPC_SERVER].target
    assert await grpc_call(target, metadata) == grpc.StatusCode.OK  # the second of two
    assert await grpc_call(target, metadata) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert backend.stats.requests == 2
