"""Quota buckets of keys and tenants that went quiet are freed once refilled (issue 19): the
limiter returns to its idle size, on an injected clock and on a real gateway's sweep (which
also empties the GeoIP cache of addresses gone quiet)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from gateway.quota.allowance import AllowanceLink
from gateway.quota.config import QuotaConfig, QuotaLimits
from gateway.quota.limiter import Quotas
from tests.gateway.support import FAST_ENGINE, config_for
from tests.reliability.support import metric_value
from tests.security.auth_support import CHAT, MODEL, issue
from tests.servers import EmulatorFactory, GatewayFactory, emulators, gateways, settle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_refilled_buckets_are_dropped_and_busy_ones_kept() -> None:
    clock = Clock()
    limits = QuotaLimits(rps=10, burst=10, tokens_per_minute=600)  # 10 tokens a second
    quotas = Quotas(QuotaConfig(per_key=limits, per_tenant=limits), clock=clock)
    for n in range(5):
        quotas.admit(f"key{n}", f"tenant{n % 2}", 20)
    assert len(quotas) == 5 * 2 + 2 * 2  # requests + tokens, per key and per tenant
    assert sum(quotas.forget_full(step=3)) == 0  # nothing has refilled yet
    quotas.charge("key0", "tenant0", 100)  # completion tokens: 120 owed at 10 a second
    clock.now += 5.0  # 50 tokens back: only key0 (120 owed) and tenant0 (160) still owe
    steps = list(quotas.forget_full(step=3))
    assert len(steps) == 5  # 14 buckets, 3 a step
    assert len(quotas) == 2
    clock.now += 60.0
    assert sum(quotas.forget_full()) == 2
    assert len(quotas) == 0
    quotas.admit("key0", "tenant0", 20)  # a key that comes back starts full, as before
    assert len(quotas) == 4


def test_a_bucket_used_during_a_sweep_is_checked_at_its_own_time() -> None:
    clock = Clock()
    quotas = Quotas(QuotaConfig(per_key=QuotaLimits(rps=1, burst=1)), clock=clock)
    quotas.admit("a", "t", 0)
    quotas.admit("b", "t", 0)
    clock.now += 2.0
    sweep = quotas.forget_full(step=1)
    assert next(sweep) == 1  # a: refilled
    quotas.admit("b", "t", 0)  # b is used again between two steps
    assert next(sweep) == 0  # so it stays
    assert len(quotas) == 1


def test_a_shared_allowance_goes_after_a_whole_sweep_unused() -> None:
    clock = Clock()
    link = AllowanceLink(0.1)
    quotas = Quotas(QuotaConfig(per_key=QuotaLimits(rps=100, burst=100)), clock=clock, link=link)
    quotas.admit("busy", "t", 0)
    quotas.admit("quiet", "t", 0)
    assert len(link.wanted) == 2  # both claim an allowance from the store
    while link.wanted:  # what the refiller does with the store's answers
        allowance = link.wanted.popleft()
        allowance.queued = False
        allowance.granted(10.0, store_had_more=True)
    assert sum(quotas.forget_full()) == 0  # first sight of both: nothing known about use
    quotas.admit("busy", "t", 0)
    assert sum(quotas.forget_full()) == 1  # quiet was untouched for a whole interval
    assert len(quotas) == 1  # busy was used since the last sweep
    assert sum(quotas.forget_full()) == 1  # ...and not since
    assert len(quotas) == 0
    quotas.admit("busy", "t", 0)
    assert link.wanted[-1] is not allowance and len(link.wanted) == 1  # a fresh allowance


@pytest.fixture
async def rig() -> AsyncIterator[tuple[EmulatorFactory, GatewayFactory]]:
    async with emulators(MODEL, FAST_ENGINE) as emulator, gateways() as gateway:
        yield emulator, gateway


async def test_a_gateway_frees_the_buckets_of_keys_gone_quiet(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    keys = [issue(f"tenant{n}") for n in range(3)]
    generous = {"rps": 1000, "burst": 1000, "tokens_per_minute": 60_000_000}  # ms to refill
    running = await gateway(
        config_for(
            {"b1": backend.url},
            auth={"keys": [k.entry for k in keys]},
            quotas={"per_key": generous, "per_tenant": generous},
            routing={"prefix_sweep_interval_s": 0.05},
        )
    )
    async with aiohttp.ClientSession() as session:
        for key in keys:
            async with session.post(
                running.url + "/v1/chat/completions", json=CHAT, headers=key.headers
            ) as reply:
                assert reply.status == 200
    swept = metric_value(running, "meridian_idle_sweeps_total")

    def refilled_and_dropped() -> bool:
        # Two sweeps after the requests ended, the latest of which kept no bucket (and no
        # client address in the GeoIP cache: none has sent a request since).
        return metric_value(running, "meridian_idle_sweeps_total") >= swept + 2 and (
            metric_value(running, "meridian_quota_buckets") == 0
            and metric_value(running, "meridian_geo_cached_addresses") == 0
        )

    await settle(refilled_and_dropped)  # a ceiling against hangs, not a timing claim
    assert metric_value(running, "meridian_quota_buckets_dropped_total") >= 12  # 3 keys, 3 tenants
