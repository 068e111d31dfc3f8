from __future__ import annotations

import random

from loadtests.sim.scenario import Bursts, ClientPopulation
from loadtests.sim.trace import _SYSTEM_OPEN, _USER_OPEN, arrival_times, build_trace, continue_chain
from routing.prefix import block_hashes, canonical_chat, tenant_seed
from tests.sim.conftest import build, tiny


def test_continued_chain_equals_hashing_the_whole_canonical_prompt() -> None:
    system, question = "s" * 1001, "q" * 333
    canonical = canonical_chat(
        [{"role": "system", "content": system}, {"role": "user", "content": question}]
    )
    assert canonical == _SYSTEM_OPEN + system.encode() + _USER_OPEN + question.encode()
    head = _SYSTEM_OPEN + system.encode() + _USER_OPEN
    full = block_hashes(head, "acme")
    cut = len(full) * 64
    rest = continue_chain(head[cut:] + question.encode(), full[-1])
    assert full + tuple(rest) == block_hashes(canonical, "acme")
    assert continue_chain(b"x" * 64, tenant_seed("acme")) == list(block_hashes(b"x" * 64, "acme"))


def test_trace_hashes_match_the_requests_prompt_and_are_shared_per_system_prompt() -> None:
    trace = build_trace(build(tiny()), requests=200)
    assert len(trace) == 200
    by_prefix: dict[tuple[int, ...], set[str]] = {}
    for request in trace.requests():
        # prompt_tokens rounds the bytes up; only full 64-byte blocks are hashed
        low, high = (4 * request.prompt_tokens - 3) // 64, 4 * request.prompt_tokens // 64
        assert low <= len(request.hashes) <= high
        by_prefix.setdefault(request.prefix_hashes, set()).add(request.tenant)
    assert all(len(tenants) == 1 for tenants in by_prefix.values())  # tenants never share
    assert 1 < len(by_prefix) <= 3 * 2


def test_same_seed_same_trace_and_another_seed_another() -> None:
    first = build_trace(build(tiny()), requests=100)
    again = build_trace(build(tiny()), requests=100)
    other = build_trace(build(tiny(seed=6)), requests=100)
    assert list(first.requests()) == list(again.requests())
    assert [r.at for r in first.requests()] != [r.at for r in other.requests()]


def test_lazy_trace_replays_the_same_requests_on_every_pass() -> None:
    two_populations = {
        "near-users": {"region": "near", "rate_rps": 4},
        "far-users": {"region": "far", "rate_rps": 2},
    }
    trace = build_trace(build(tiny(clients=two_populations, gateways={"near": 1, "far": 2})), 300)
    passes = [list(trace.requests()) for _ in range(2)]
    assert passes[0] == passes[1]
    assert [r.id for r in passes[0]] == list(range(300))
    assert [r.at for r in passes[0]] == trace.arrivals.tolist() == sorted(trace.arrivals.tolist())
    assert [r.origin for r in passes[0]] == [trace.regions[o] for o in trace.origins]
    assert {r.origin for r in passes[0]} == {"near", "far"}
    assert trace.span_s == passes[0][-1].at
    # The trace itself holds columns, not requests: about 10 bytes a request.
    assert trace.arrivals.nbytes + trace.populations.nbytes + trace.origins.nbytes == 300 * 12


def test_a_longer_trace_starts_with_the_shorter_one() -> None:
    """Asking for more requests extends the same arrival process instead of reshuffling it."""
    short, long = (build_trace(build(tiny()), requests=n) for n in (50, 400))
    assert list(short.requests()) == list(long.requests())[:50]


def test_bursts_keep_the_mean_rate_and_concentrate_arrivals() -> None:
    arrival = Bursts(period_s=60, burst_s=10, burst_factor=5)
    population = ClientPopulation(region="near", rate_rps=10, arrival=arrival)
    times = arrival_times(population, random.Random(1), 6000.0)
    assert abs(len(times) / 6000.0 - 10.0) < 0.3
    in_burst = sum(1 for t in times if t % 60 < 10)
    assert abs(in_burst / len(times) - 50 / 60) < 0.02  # 5x rate for 1/6 of the time
