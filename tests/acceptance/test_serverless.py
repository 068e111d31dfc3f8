"""Issue 5 acceptance (real processes): a serverless backend scaled to zero is avoided for
interactive traffic while a warm backend predicts better, and used when it is the only option.

The gateway sits in us-east next to ``near-serverless`` (cold start 1.5 s); ``far-dedicated`` is
warm but 80 ms away. Only the serverless backend serves ``m-solo``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.acceptance.conftest import Launch, Stack
from tests.acceptance.harness import (
    Served,
    admin,
    chat,
    explain,
    until_probes_rank_as_configured,
    wait_for_signals,
)
from tests.acceptance.workload import table, unique_prompt, user
from tests.servers import hang_bound

FLEET = Path(__file__).parent / "fleets" / "serverless.yaml"
COLD_START_MS = 1500.0


@pytest.fixture(scope="module")
def serverless(launch: Launch) -> Stack:
    signals: dict[str, Any] = {"probes": {"interval_s": 1.0}, "engine_metrics": {"interval_s": 0.5}}
    return launch(FLEET, "us-east", signals)


async def test_a_cold_serverless_backend_is_avoided_then_used_when_it_is_the_only_option(
    serverless: Stack,
):
    near = serverless.nodes["near-serverless"]
    rows: list[tuple[str, Served]] = []
    async with aiohttp.ClientSession() as session:
        await wait_for_signals(session, serverless.gateway, "m")
        # "now warm" below ranks near against far by their probes: not by a startup stall's
        await until_probes_rank_as_configured(
            session,
            serverless.gateway,
            "m",
            serverless.config,
            ["near-serverless", "far-dedicated"],
        )
        report = await explain(session, serverless.gateway, "m", "why not the near one?")
        for _ in range(5):
            rows.append(("m, cold", await chat(session, serverless.gateway, "m", user("hi"))))
        untouched = await admin(session, near, "stats")
        solo = await chat(session, serverless.gateway, "m-solo", user(unique_prompt(20)))
        rows.append(("m-solo", solo))
        rows.append(("m, now warm", await chat(session, serverless.gateway, "m", user("hi again"))))
    print(table("serverless", ["request", "backend", "upstream_ttfb_ms", "predicted_ms"], [
        (what, r.backend, r.timing.get("upstream_ttfb"), r.predicted_ttft_ms) for what, r in rows
    ]))  # fmt: skip
    near_row = next(c for c in report["candidates"] if c["backend"] == "near-serverless")
    assert report["chosen"] == "far-dedicated"
    assert near_row["terms"]["cold_start"]["ms"] == pytest.approx(COLD_START_MS)
    assert "cold_start" in near_row["why"]
    assert all(r.backend == "far-dedicated" for what, r in rows if what == "m, cold")
    assert untouched["requests"] == 0 and untouched["cold"]  # never woken by probes either
    # The only option: served, and the cold start shows in the upstream's time to first byte.
    assert solo.status == 200 and solo.backend == "near-serverless"
    assert solo.upstream_ttfb_ms >= COLD_START_MS
    assert solo.predicted_ttft_ms is not None and solo.predicted_ttft_ms >= COLD_START_MS
    # Avoided for being cold, not for being serverless: warm and near, it now predicts better.
    assert rows[-1][1].backend == "near-serverless"


async def test_server_timing_names_the_predicted_cold_start(serverless: Stack):
    """A backend that went cold behind the gateway's back: Server-Timing shows the prediction
    beside what happened, so the cold start stands out. Self-contained: the backend is woken
    and seen warm first (it does not lean on the test before it)."""
    near = serverless.nodes["near-serverless"]
    async with aiohttp.ClientSession() as session:
        await wait_for_signals(session, serverless.gateway, "m-solo")
        woken = await chat(session, serverless.gateway, "m-solo", user(unique_prompt(20)))
        assert woken.status == 200
        await _until_predicted_warm(session, serverless.gateway, "near-serverless")
        await admin(session, near, "reset")
        reply = await chat(session, serverless.gateway, "m-solo", user(unique_prompt(20)))
    assert reply.status == 200
    assert "predicted_ttft" in reply.timing, reply.timing
    assert reply.timing["upstream_ttfb"] >= COLD_START_MS, reply.timing  # what happened
    # What was predicted: warm, when no scrape saw the reset before this request was routed
    # (nearly always: it is sent right after); a cold start, when one did. Never between.
    # Warm is no cold-start term at all (a busy machine's probes can move the rest of the
    # prediction by hundreds of milliseconds, so its size tells nothing).
    predicted, cold = reply.timing["predicted_ttft"], reply.timing.get("cold_start", 0.0)
    assert cold == 0.0 or predicted >= COLD_START_MS, reply.timing


async def _until_predicted_warm(session: aiohttp.ClientSession, gateway: str, backend: str) -> None:
    """Until the gateway's prediction for ``backend`` has no cold start in it."""
    deadline = time.monotonic() + hang_bound(10.0)
    while time.monotonic() < deadline:
        report = await explain(session, gateway, "m-solo", "warm yet?")
        row = next(c for c in report["candidates"] if c["backend"] == backend)
        if not (row["terms"].get("cold_start") or {}).get("ms"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the gateway never saw {backend} warm")
