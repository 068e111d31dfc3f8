"""Two gateway processes sharing one Redis route as one: prefix affinity learned on one replica
holds on the other, in-flight counts add up, and each backend is probed by one replica only,
until it dies and the other takes over within the lease period."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.redis_server import RedisClusterServers, RedisServer
from tests.replicas.support import (
    BACKENDS,
    Replica,
    Tier,
    chat,
    chat_body,
    explain,
    tier,
    wait_for,
)
from tests.servers import HANG_BOUND_S as SETTLE_S

CONVERSATIONS = 6  # all must stick: passing by chance is 1 in 2**6


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[RedisClusterServers]:
    with RedisClusterServers(tmp_path / "cluster") as cluster:
        yield cluster


def _system_prompt(conversation: int) -> str:
    # ~4000 tokens: uncached, the gateway predicts ~0.8 s of prefill; cached, ~0.
    words = " ".join(f"w{conversation}-{i}" for i in range(2600))
    return f"Conversation {conversation}. Context follows. {words}"


async def _fed(replica: Replica, session: aiohttp.ClientSession) -> tuple[int, int]:
    state = await replica.state(session)
    return int(state["prefix_fed_blocks"]), int(state["prefix_queued_blocks"])


async def _affinity_holds_across_replicas(t: Tier) -> None:
    first, second = t.replicas
    for conversation in range(CONVERSATIONS):
        turn1 = [
            {"role": "system", "content": _system_prompt(conversation)},
            {"role": "user", "content": "What is in the context?"},
        ]
        fed_before, _ = await _fed(second, t.session)
        status, backend1, _ = await chat(t.session, first.url, turn1)
        assert status == 200 and backend1 in BACKENDS

        async def learned(before: int = fed_before) -> bool:
            fed, queued = await _fed(second, t.session)
            return fed > before and queued == 0

        await wait_for(learned, 30.0)
        turn2 = [
            *turn1,
            {"role": "assistant", "content": "Words."},
            {"role": "user", "content": "More?"},
        ]
        # Not by chance: replica 2 knows the prefix is cached where turn 1 went, and nowhere
        # else (which backends turn 1 picks depends on what each has learned: on a busy
        # machine all six may go to one, so "both were first choices" is no proof).
        cached = await _cached_tokens(t.session, second.url, turn2)
        assert cached[backend1] > 0 and all(n == 0 for b, n in cached.items() if b != backend1), (
            conversation,
            backend1,
            cached,
        )
        status, backend2, _ = await chat(t.session, second.url, turn2)
        assert status == 200
        assert backend2 == backend1, f"conversation {conversation}: {backend1} then {backend2}"


async def _cached_tokens(
    session: aiohttp.ClientSession, url: str, messages: list[dict[str, str]]
) -> dict[str, int]:
    """Each backend's cached prompt tokens for ``messages``, as the replica at ``url`` sees them."""
    report = await explain(session, url, messages)
    return {str(c["backend"]): int(c["cached_tokens"]) for c in report["candidates"]}


async def test_first_turn_on_replica_1_gets_prefix_affinity_on_replica_2(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    async with tier(tmp_path, {"backend": "redis", "url": redis_server.url}) as t:
        await _affinity_holds_across_replicas(t)


async def test_affinity_across_replicas_on_a_redis_cluster(
    tmp_path: Path, redis_cluster: RedisClusterServers
) -> None:
    async with tier(tmp_path, {"backend": "redis-cluster", "urls": redis_cluster.urls}) as t:
        await _affinity_holds_across_replicas(t)


async def _open_stream(session: aiohttp.ClientSession, url: str) -> aiohttp.ClientResponse:
    body = chat_body([{"role": "user", "content": "count slowly"}], 2000, True)
    response = await session.post(url + "/v1/chat/completions", json=body)
    assert response.status == 200
    await response.content.readline()  # the first event: the request is in flight upstream
    return response


def _tier_total(state: dict[str, Any]) -> int:
    return sum(int(n) for n in state["in_flight"].values())


async def test_in_flight_counts_seen_by_both_replicas_add_up(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    async with tier(tmp_path, {"backend": "redis", "url": redis_server.url}) as t:
        first, second = t.replicas
        opened = [await _open_stream(t.session, first.url) for _ in range(3)]
        opened += [await _open_stream(t.session, second.url) for _ in range(2)]

        async def both_see_five() -> bool:
            states = await t.states()
            return all(_tier_total(s) == 5 for s in states)

        await wait_for(both_see_five, 30.0)
        own = [sum(s["own_in_flight"].values()) for s in await t.states()]
        assert own == [3, 2]
        for response in opened:
            response.close()

        async def both_see_none() -> bool:
            return all(_tier_total(s) == 0 for s in await t.states())

        await wait_for(both_see_none, 30.0)


async def _leaders(t: Tier) -> dict[str, list[int]]:
    states = await t.states()
    return {b: [i for i, s in enumerate(states) if b in s["leads"]] for b in BACKENDS}


async def test_each_backend_is_probed_by_one_replica_and_a_dead_prober_is_replaced(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    async with tier(tmp_path, {"backend": "redis", "url": redis_server.url}) as t:
        leaders = await _leaders(t)
        assert all(len(holders) == 1 for holders in leaders.values()), leaders
        before = await t.states()
        window = time.monotonic()

        after: list[dict[str, Any]] = []
        window_s = 0.0

        async def each_leader_probed_twice_and_shared() -> bool:
            nonlocal after, window_s
            after = await t.states()
            window_s = time.monotonic() - window
            # the follower's snapshot is refreshed on its own clock: wait on it too, not only
            # on the leader's count (its age only grows, so waiting cannot make this true)
            return all(
                after[leader]["probes_total"][b] - before[leader]["probes_total"][b] >= 2
                and after[1 - leader]["signal_age_s"][b] < window_s
                for b, (leader,) in leaders.items()
            )

        await wait_for(each_leader_probed_twice_and_shared, SETTLE_S)
        for backend, (leader,) in leaders.items():
            follower = 1 - leader
            probes = [
                after[i]["probes_total"][backend] - before[i]["probes_total"][backend]
                for i in (0, 1)
            ]
            assert probes[leader] >= 2 and probes[follower] == 0, (backend, probes)
            # ...yet the follower's snapshot carries a measurement the leader made during the
            # window (its age is less than the window: relative, whatever the machine's load).
            assert after[follower]["signal_age_s"][backend] < window_s, (backend, window_s)

        victim = leaders[BACKENDS[0]][0]
        survivor = t.replicas[1 - victim]
        t.replicas[victim].kill()

        async def took_over() -> bool:
            state = await survivor.state(t.session)
            return all(b in state["leads"] for b in BACKENDS)

        # The survivor takes every lease over once the victim's lapse (LEASE_PERIOD_S); how soon
        # after that is a measurement on a busy machine, not this test's promise.
        await wait_for(took_over, SETTLE_S, step_s=0.02)
        probes_then = (await survivor.state(t.session))["probes_total"]

        async def survivor_probes_all() -> bool:
            probes_now = (await survivor.state(t.session))["probes_total"]
            return all(probes_now[b] > probes_then[b] for b in BACKENDS)

        await wait_for(survivor_probes_all, SETTLE_S)
