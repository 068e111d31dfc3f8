"""Quotas shared by replicas through the state store's token buckets: each replica spends a
local allowance its refiller claims in the background. Here two limiters (two replicas) share
one real store on a frozen clock, and the refill rounds are run by hand, in every interleaving a
seeded schedule draws, so the bounds are checked exactly:

    limit - 2 (what two replicas hold below one token each) ≤ admitted ≤ limit + 2 x allowance

(the store's bucket does not refill: its clock stands still). The processes-and-Redis version is
``test_quotas_replicas.py``."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry

from gateway.errors import ApiError
from gateway.quota.allowance import AllowanceLink
from gateway.quota.config import QuotaConfig, QuotaLimits
from gateway.quota.limiter import Quotas
from gateway.quota.refill import Refiller
from gateway.state.config import StateConfig
from gateway.state.memory import MemoryStore
from gateway.state.sync import SharedStateSync

BURST = 50
FRACTION = 0.1
ALLOWANCE = BURST * FRACTION


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Replica:
    def __init__(self, config: QuotaConfig, sync: SharedStateSync, clock: Clock) -> None:
        self.link = AllowanceLink(config.allowance)
        self.registry = CollectorRegistry()
        self.quotas = Quotas(config, self.registry, clock=clock, link=self.link)
        self.refiller = Refiller(self.link, sync, self.registry, clock=clock)
        self.admitted = 0

    def claims(self, result: str) -> float:
        found = self.registry.get_sample_value("meridian_quota_claims_total", {"result": result})
        return found or 0.0

    def request(self, prompt_tokens: int = 0) -> bool:
        try:
            self.quotas.admit("k1", "acme", prompt_tokens)
        except ApiError as err:
            assert err.status == 429
            return False
        self.admitted += 1
        return True


def _rig(quotas: QuotaConfig) -> tuple[list[Replica], Clock]:
    clock = Clock()
    store = MemoryStore(wall=clock)
    sync = SharedStateSync(store, StateConfig(), replica_id="shared", wall=clock, mono=clock)
    return [Replica(quotas, sync, clock), Replica(quotas, sync, clock)], clock


async def _settle(replicas: list[Replica]) -> None:
    for replica in replicas:
        while not replica.refiller.idle():
            await replica.refiller.tick()


@pytest.mark.parametrize("seed", range(12))
async def test_two_replicas_admit_the_limit_within_two_allowances(seed: int) -> None:
    draw = random.Random(seed)
    config = QuotaConfig(per_key=QuotaLimits(rps=0.001, burst=BURST), allowance=FRACTION)
    replicas, _ = _rig(config)
    refill_odds = draw.choice((0.05, 0.3, 0.7))  # refills far behind, close, or ahead
    for _ in range(300):
        replica = draw.choice(replicas)
        if draw.random() < refill_odds:
            await replica.refiller.tick()
        else:
            replica.request()
    while True:  # then until a whole round admits nothing: every claim answered, none left
        before = sum(r.admitted for r in replicas)
        for replica in replicas:
            while replica.request():
                pass
        await _settle(replicas)
        if sum(r.admitted for r in replicas) == before:
            break
    admitted = sum(r.admitted for r in replicas)
    assert BURST - 2 <= admitted <= BURST + 2 * ALLOWANCE


async def test_the_first_request_on_a_replica_does_not_wait_for_the_store() -> None:
    config = QuotaConfig(per_key=QuotaLimits(rps=10, burst=20))  # allowance 2 requests
    (first, second), _ = _rig(config)
    assert first.request() and first.request()  # overdraft: nothing claimed yet
    assert not first.request()  # one allowance ahead of the store is as far as it goes
    await first.refiller.tick()  # claims the overdraft and an allowance: 4 of 20
    assert first.request() and first.request() and first.request()
    assert second.request()  # the other replica's first request: its own overdraft
    assert first.claims("granted") == 1


async def test_completion_tokens_are_owed_to_the_store_and_slow_the_next_request() -> None:
    config = QuotaConfig(per_tenant=QuotaLimits(tokens_per_minute=600), allowance=0.1)
    (first, second), clock = _rig(config)
    assert first.request(prompt_tokens=50)  # within the 60-token overdraft
    await first.refiller.tick()  # pays the 50 owed and claims 60: 110 of 600 taken
    first.quotas.charge(None, "acme", 480)  # completion: first now owes 420
    await first.refiller.tick()  # claims 420 + 60 from the 490 left: 10 remain
    assert second.request(prompt_tokens=40)  # second's own overdraft: it owes 40
    await second.refiller.tick()  # the store has 10: a partial claim, and second owes 30
    assert not second.request(prompt_tokens=40)
    assert second.claims("partial") == 1
    clock.now += 10.0  # 100 tokens refill at 10 a second
    await second.refiller.tick()  # claims the 30 owed and the 40 refused, 60 at least: 90
    assert second.request(prompt_tokens=40)


async def test_a_bucket_the_store_found_empty_is_not_asked_again_before_it_refills() -> None:
    config = QuotaConfig(per_key=QuotaLimits(rps=1, burst=2), allowance=0.5)
    (first, _), clock = _rig(config)
    assert first.request()
    await first.refiller.tick()  # pays 1, claims 1: the store is empty
    assert first.request()
    for _ in range(50):
        assert not first.request()  # each refusal asks for a claim...
        await first.refiller.tick()
    asked = sum(first.claims(result) for result in ("granted", "partial", "refused"))
    assert asked <= 3  # ...but the store is asked once until it has a token again
    clock.now += 1.0
    await first.refiller.tick()
    assert first.request()


async def test_the_host_store_forgets_buckets_that_have_refilled() -> None:
    clock = Clock()
    store = MemoryStore(wall=clock)
    for i in range(30_000):  # one bucket per tenant name, each refilled a second later
        await store.take_tokens(f"quota:tenant:t{i}:requests", rate_per_s=1.0, burst=1.0)
        clock.now += 0.001
    summary = await store.summary()
    assert summary.key_counts["token_bucket"] <= 10_000
