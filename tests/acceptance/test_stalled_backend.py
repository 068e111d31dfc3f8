"""A backend that stops answering, with real processes (routing.awaiting): the path to it
black-holes requests (the emulator's /admin/rtt at two minutes, so its engine never sees them
and its metrics stay idle) while its probes stay fast. Traffic must leave it while its first
stuck request is still waiting, not when the first-token timeout (60 s) fails it; nothing may
stay open upstream once the clients of the stuck requests leave. (A stall the engine sees,
the emulator's stall fault, is left on its queue metrics alone: 5 requests here.)

Requests go one after another; each waits for its own fate, synchronised on the gateway:
answered (by far), or open upstream at near (``meridian_upstream_in_flight``). Without the
check every request after the stall would go to near until the timeout (LIMIT of them here).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import pytest

from tests.acceptance.conftest import Launch, Stack
from tests.acceptance.harness import Served, admin, backend_total, chat, explain, wait_for_signals
from tests.acceptance.workload import unique_prompt, user
from tests.servers import hang_bound

pytestmark = pytest.mark.timeout(300)

FLEET = Path(__file__).parent / "fleets" / "path.yaml"
MODEL = "m"
SETTLED = 10  # consecutive requests on one backend: the router has made up its mind
LIMIT = 200


@pytest.fixture(scope="module")
def fleet(launch: Launch) -> Stack:
    signals = {"probes": {"interval_s": 1.0}, "engine_metrics": {"interval_s": 0.5}}
    return launch(FLEET, "us-east", signals)


async def _open_at(session: aiohttp.ClientSession, fleet: Stack, backend: str) -> float:
    return await backend_total(session, fleet.gateway, "meridian_upstream_in_flight", backend)


async def _settled_on(session: aiohttp.ClientSession, fleet: Stack, backend: str) -> None:
    served: list[Served] = []
    while len(served) < LIMIT:
        served.append(await chat(session, fleet.gateway, MODEL, user(unique_prompt(50))))
        if len(served) >= SETTLED and all(r.backend == backend for r in served[-SETTLED:]):
            return
    raise AssertionError(f"never settled on {backend}: {[r.backend for r in served]}")


async def test_a_stalled_backend_is_left_while_its_first_request_still_waits(
    fleet: Stack,
) -> None:
    near = fleet.nodes["near"]
    async with aiohttp.ClientSession() as session:
        await wait_for_signals(session, fleet.gateway, MODEL)
        await _settled_on(session, fleet, "near")
        await admin(session, near, "rtt", {"rtt_ms": 120_000.0, "probe_rtt_ms": 2.0})
        stalled_at = time.monotonic()
        stuck: list[asyncio.Task[Served]] = []
        answered: list[Served] = []
        try:
            while len(answered) + len(stuck) < LIMIT:
                before = await _open_at(session, fleet, "near")
                task = asyncio.create_task(
                    chat(session, fleet.gateway, MODEL, user(unique_prompt(50)))
                )
                deadline = time.monotonic() + hang_bound(30.0)
                while not task.done() and await _open_at(session, fleet, "near") <= before:
                    assert time.monotonic() < deadline, (
                        f"a request neither ended nor opened upstream in 30 s, after {len(stuck)} "
                        "stuck at near (its connection pool full?)"
                    )
                    await asyncio.sleep(0.005)
                if not task.done():
                    stuck.append(task)
                    continue
                answered.append(task.result())
                assert answered[-1].status == 200
                if len(answered) >= SETTLED and all(
                    r.backend == "far" for r in answered[-SETTLED:]
                ):
                    break
            left_after_s = time.monotonic() - stalled_at
            report = await explain(session, fleet.gateway, MODEL, "after the stall")
            print(
                f"\nstalled backend: {len(stuck)} requests stuck at near, "
                f"{len(answered)} answered by far, left within {left_after_s:.2f} s"
            )
            assert stuck, "the first request after the stall goes to near (nothing knew)"
            assert all(r.backend == "far" for r in answered[-SETTLED:])
            assert len(stuck) < LIMIT // 4
            assert not any(task.done() for task in stuck)  # left before any of them timed out
            assert "first token overdue: near" in json.dumps(report)  # explain says why
        finally:
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
            await admin(session, near, "reset")
        deadline = time.monotonic() + hang_bound(30.0)
        while await _open_at(session, fleet, "near") > 0:  # the clients left: so did upstream
            assert time.monotonic() < deadline, "requests to near stayed open upstream"
            await asyncio.sleep(0.01)
