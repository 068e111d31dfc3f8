"""Faults on demand, through real sockets, and the RTT emulated in user space."""

from __future__ import annotations

import asyncio
import random

import aiohttp
import pytest

from loadtests.emulator.config import FaultConfig
from loadtests.emulator.faults import plan_request
from tests.emulator.helpers import chat

FAST = {"first_token_overhead_ms": 0, "decode_base_ms": 10, "decode_per_seq_ms": 0}


async def _stream_times(url: str, payload: dict[str, object]) -> list[float]:
    """Arrival time (s since send) of every token chunk."""
    loop = asyncio.get_running_loop()
    times: list[float] = []
    async with aiohttp.ClientSession() as session:
        sent = loop.time()
        async with session.post(url + "/v1/chat/completions", json=payload) as resp:
            assert resp.status == 200
            async for line in resp.content:
                if line.startswith(b"data: {") and b'"content":""' not in line:
                    times.append(loop.time() - sent)
    return times


def test_fault_plans_replay_under_a_seed() -> None:
    faults = FaultConfig(error_rate=0.2, rate_limit_rate=0.2, stall_ms=50, stall_rate=0.5)
    rng, rng_again = random.Random(7), random.Random(7)
    plans = [plan_request(faults, rng) for _ in range(200)]
    assert plans == [plan_request(faults, rng_again) for _ in range(200)]
    statuses = [p.rejection.status for p in plans if p.rejection is not None]
    assert 50 < len(statuses) < 110 and set(statuses) == {429, 500}
    assert 60 < sum(p.stall_s > 0 for p in plans) < 140


@pytest.mark.parametrize(
    ("faults", "status", "retry_after"),
    [({"error_rate": 1}, 500, None), ({"rate_limit_rate": 1, "retry_after_s": 2}, 429, "2"),
     ({"unavailable_rate": 1, "retry_after_s": 0.5}, 503, "0.5")],
)  # fmt: skip
async def test_rejections(start, faults, status, retry_after) -> None:
    emulator = await start(faults=faults)
    async with aiohttp.ClientSession() as session:
        async with session.post(emulator.url + "/v1/chat/completions", json=chat()) as resp:
            body = await resp.json()
    assert resp.status == status and body["error"]["code"] == status
    assert resp.headers.get("Retry-After") == retry_after
    assert emulator.stats.errors == 1 and emulator.stats.running == 0


async def test_stall_and_drip_set_at_run_time(start) -> None:
    emulator = await start(engine=FAST)
    async with aiohttp.ClientSession() as session:
        faults = {"stall_ms": 300, "drip_ms": 40}
        async with session.post(emulator.url + "/admin/faults", json=faults) as resp:
            assert resp.status == 200
    times = await _stream_times(emulator.url, chat(max_tokens=4, stream=True))
    # Lower bounds only: a token is released no earlier than its engine time, but a busy
    # machine can release it later (and the next ones catch up), so gaps and upper bounds are
    # not the emulator's to promise. Exact gaps: test_engine's drip test, in virtual time.
    # Token k is due after the 300 ms stall plus k gaps of the 40 ms drip and a 10 ms step.
    assert len(times) == 4
    assert all(t >= 0.3 + k * 0.050 for k, t in enumerate(times)), times


async def test_die_mid_stream_drops_the_connection(start) -> None:
    emulator = await start(engine=FAST, faults={"die_after_tokens": 3})
    tokens = 0
    with pytest.raises(aiohttp.ClientPayloadError):
        async with aiohttp.ClientSession() as session:
            payload = chat(max_tokens=10, stream=True)
            async with session.post(emulator.url + "/v1/chat/completions", json=payload) as resp:
                async for line in resp.content:
                    tokens += line.startswith(b"data: {") and b'"content":""' not in line
    assert tokens == 3
    assert emulator.stats.errors == 1 and emulator.stats.running == 0


async def test_refuse_connections_until_faults_cleared(start) -> None:
    emulator = await start(faults={"refuse_connections": True})
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            async with session.get(emulator.url + "/v1/models"):
                pass
        async with session.post(emulator.url + "/admin/faults", json={}) as resp:
            assert resp.status == 200
        async with session.get(emulator.url + "/v1/models") as resp:
            assert resp.status == 200


async def test_invalid_faults_are_rejected(start) -> None:
    emulator = await start()
    async with aiohttp.ClientSession() as session:
        async with session.post(emulator.url + "/admin/faults", json={"error_rate": 2}) as resp:
            assert resp.status == 400
            assert "error_rate" in (await resp.json())["error"]["message"]


async def test_rtt_adds_to_ttft_not_to_itl(start) -> None:
    near = await start(name="near", engine=FAST)
    far = await start(name="far", engine=FAST, rtt_ms=200)
    payload = chat(max_tokens=5, stream=True)
    near_times, far_times = await asyncio.gather(
        _stream_times(near.url, payload), _stream_times(far.url, payload)
    )
    # The round trip comes before the first token: it cannot arrive sooner (a lower bound holds
    # however busy the machine; exact phases are test_timing's, on the engine clock).
    assert far_times[0] >= 0.2
    # ...and not between tokens: were the 200 ms added per token, the four gaps would span at
    # least 0.8 s; paced by engine time they span ~40 ms (a late gap is made up by the next).
    assert far_times[-1] - far_times[0] < 0.4
    assert len(far_times) == len(near_times) == 5


async def test_admin_reset_clears_counters_and_cache(start) -> None:
    emulator = await start()
    async with aiohttp.ClientSession() as session:
        prompt = chat("p" * 400, max_tokens=1)
        for _ in range(2):
            async with session.post(emulator.url + "/v1/chat/completions", json=prompt) as resp:
                cached = (await resp.json())["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > 0
        async with session.post(emulator.url + "/admin/reset") as resp:
            assert (await resp.json())["requests"] == 0
        async with session.post(emulator.url + "/v1/chat/completions", json=prompt) as resp:
            assert (await resp.json())["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        async with session.get(emulator.url + "/metrics") as resp:
            assert resp.status == 200


async def test_admin_rtt_can_leave_the_probes_path_fast(start) -> None:
    """A health endpoint in front of the slow hop: requests pay the round trip, probes not."""
    emulator = await start(engine=FAST)
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as session:
        change = {"rtt_ms": 1000.0, "probe_rtt_ms": 0.0}
        async with session.post(emulator.url + "/admin/rtt", json=change) as resp:
            assert await resp.json() == change
        sent = loop.time()
        async with session.get(emulator.url + "/v1/models") as resp:
            assert resp.status == 200
        probe_s = loop.time() - sent
        sent = loop.time()
        async with session.post(emulator.url + "/v1/chat/completions", json=chat(max_tokens=1)):
            request_s = loop.time() - sent
        assert request_s >= 1.0 > probe_s  # sleeps: never shorter than asked
        async with session.post(emulator.url + "/admin/reset") as resp:
            assert resp.status == 200
        async with session.post(emulator.url + "/admin/rtt", json={"rtt_ms": 5.0}) as resp:
            assert await resp.json() == {"rtt_ms": 5.0}  # probes follow the requests again
