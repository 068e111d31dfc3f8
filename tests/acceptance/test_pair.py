"""Issue 5 acceptance on two identical backends (real processes): prefix affinity as a term of
the TTFT prediction, and outlier ejection with readmission on the configured schedule."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.acceptance.conftest import Launch, Stack
from tests.acceptance.harness import (
    Node,
    admin,
    admin_of,
    backend_total,
    chat,
    explain,
    wait_for_signals,
)
from tests.acceptance.workload import table, unique_prompt, user
from tests.servers import hang_bound, settle

FLEET = Path(__file__).parent / "fleets" / "pair.yaml"
MODEL = "m"
SYSTEM_TOKENS = 3000  # 600 ms of prefill at 5000 tokens/s when not cached
BASE_EJECTION_S = 1.0
CONSECUTIVE_FAILURES = 3


@pytest.fixture(scope="module")
def pair(launch: Launch) -> Stack:
    signals: dict[str, Any] = {
        "probes": {"interval_s": 1.0},
        "engine_metrics": {"interval_s": 0.3},
        "tick_interval_s": 0.05,
        "outlier": {
            "consecutive_failures": CONSECUTIVE_FAILURES,
            "base_ejection_s": BASE_EJECTION_S,
            "max_ejection_s": 10.0,
            "interval_s": 30.0,
            "max_ejection_percent": 50.0,
            "panic_threshold": 0.2,
        },
    }
    return launch(FLEET, "us-east", signals)


async def test_a_cached_conversation_stays_until_its_backend_is_overloaded(pair: Stack):
    system = {"role": "system", "content": unique_prompt(SYSTEM_TOKENS)}
    conversation = [system]
    route: list[tuple[str, str | None, int | None, float | None]] = []
    async with aiohttp.ClientSession() as session:
        await wait_for_signals(session, pair.gateway, MODEL)
        for turn in range(5):
            conversation.append({"role": "user", "content": f"question {turn}"})
            reply = await chat(session, pair.gateway, MODEL, conversation)
            route.append(
                (f"turn {turn}", reply.backend, reply.cached_tokens, reply.predicted_ttft_ms)
            )
            conversation.append({"role": "assistant", "content": f"answer {turn}"})
        home = route[0][1]
        assert home is not None
        load = asyncio.gather(*(_long_request(session, pair.nodes[home]) for _ in range(12)))
        await _until_queue_seen(session, pair.gateway, home)
        conversation.append({"role": "user", "content": "question under load"})
        loaded = await chat(session, pair.gateway, MODEL, conversation)
        route.append(("under load", loaded.backend, loaded.cached_tokens, loaded.predicted_ttft_ms))
        await load
    print(table("conversation route", ["request", "backend", "cached", "predicted_ms"], route))
    assert all(backend == home for _, backend, _, _ in route[:5]), route
    assert all((cached or 0) >= SYSTEM_TOKENS - 64 for _, _, cached, _ in route[1:5]), route
    assert loaded.backend is not None and loaded.backend != home, route


async def _long_request(session: aiohttp.ClientSession, node: Node) -> None:
    """Load straight to one backend, around the gateway: only its metrics page shows it."""
    body = {"model": MODEL, "messages": user(unique_prompt(SYSTEM_TOKENS)), "max_tokens": 60}
    async with session.post(f"{node.url}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        await resp.read()


async def _until_queue_seen(session: aiohttp.ClientSession, gateway: str, backend: str) -> None:
    deadline = time.monotonic() + hang_bound(5.0)
    while time.monotonic() < deadline:
        report = await explain(session, gateway, MODEL, "probe the queue")
        rows = {c["backend"]: c for c in report["candidates"] + report["filtered"]}
        if (rows[backend]["signals"]["waiting"] or 0) >= 4:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the gateway never saw {backend}'s queue")


async def test_a_failing_backend_is_ejected_and_readmitted_on_schedule(pair: Stack):
    alpha = pair.nodes["alpha"]
    async with aiohttp.ClientSession() as session:
        for node in pair.nodes.values():
            await admin(session, node, "reset")
        await wait_for_signals(session, pair.gateway, MODEL)
        await admin(session, alpha, "faults", {"error_rate": 1.0})
        traffic = asyncio.create_task(_steady_traffic(session, pair.gateway))
        try:
            first = await _attempts_while_ejected(session, pair.gateway, "alpha")
            healed = admin(session, alpha, "faults", {})  # while out: readmitted healthy
            second = await _attempts_while_ejected(session, pair.gateway, "alpha", healed)
            served_by_alpha = await _until_served_by(session, pair.gateway, "alpha")
        finally:
            traffic.cancel()
    # The schedule as the gateway kept it (its own clock, in its event log), not as a poller
    # on a busy machine happened to see it: base x ejections (1 s, then 2 s), never early.
    log = pair.workdir / f"gateway-{FLEET.stem}.log"
    ejections = await _outlier_log(log, "alpha", events=4)
    print(table("alpha answering 500s", ["ejection", "scheduled s", "seconds out", "attempts while out"], [
        (n + 1, out["ejection_s"], back - at, attempts)
        for n, ((at, out, back), attempts) in enumerate(zip(ejections, [first, second], strict=True))
    ]))  # fmt: skip
    assert [out["ejections"] for _, out, _ in ejections] == [1, 2], ejections
    assert [out["ejection_s"] for _, out, _ in ejections] == [BASE_EJECTION_S, 2 * BASE_EJECTION_S]
    # Log times are truncated to the millisecond: a readmission on the dot may read 1 ms early.
    assert all(back - at >= out["ejection_s"] - 0.002 for at, out, back in ejections), ejections
    assert [first, second] == [0, 0]
    assert served_by_alpha


async def _outlier_log(
    log: Path, backend: str, events: int
) -> list[tuple[float, dict[str, Any], float]]:
    """(ejected at, the ejection event, readmitted at) for ``backend``'s ejections, from the
    gateway's JSON log (stderr to a file), once ``events`` of them have been written."""
    wanted = {"backend_ejected", "backend_readmitted"}
    lines: list[dict[str, Any]] = []

    def written() -> bool:
        complete = log.read_bytes().rpartition(b"\n")[0]  # not a line still being written
        records = [orjson.loads(raw) for raw in complete.splitlines() if raw.startswith(b"{")]
        lines[:] = [
            line
            for line in records
            if line.get("event") in wanted and line.get("backend") == backend
        ]
        return len(lines) >= events

    await settle(written, step_s=0.05)
    at = [datetime.fromisoformat(line["time"]).timestamp() for line in lines]
    return [
        (at[i], lines[i], at[i + 1])
        for i in range(0, events, 2)
        if lines[i]["event"] == "backend_ejected" and lines[i + 1]["event"] == "backend_readmitted"
    ]


async def _steady_traffic(session: aiohttp.ClientSession, gateway: str) -> None:
    while True:
        reply = await chat(session, gateway, MODEL, user(unique_prompt(50)))
        assert reply.status == 200  # alpha's failures fall back to beta: clients never see them
        await asyncio.sleep(0.02)


async def _ejected(session: aiohttp.ClientSession, gateway: str) -> list[str]:
    async with session.get(f"{admin_of(gateway)}/readyz") as resp:
        body = await resp.json()
    ejected: list[str] = body["backends_ejected"]
    return ejected


async def _attempts_while_ejected(
    session: aiohttp.ClientSession,
    gateway: str,
    backend: str,
    while_out: Awaitable[object] | None = None,
) -> int:
    """Wait for ``backend``'s next ejection and its readmission; the upstream attempts the
    gateway made on it in between."""
    await _poll(lambda ej: backend in ej, session, gateway)
    counted = last = await _attempts(session, gateway, backend)
    if while_out is not None:
        await while_out
    # The attempts read last *before* a state that still shows the ejection: an attempt on the
    # readmitted backend between the readmission and a later read is not "while out".
    deadline = time.monotonic() + hang_bound(10.0)
    while time.monotonic() < deadline:
        attempts = await _attempts(session, gateway, backend)
        if backend not in await _ejected(session, gateway):
            return last - counted
        last = attempts
        await asyncio.sleep(0.02)
    raise AssertionError("ejection state did not change in time")


async def _poll(condition: Any, session: aiohttp.ClientSession, gateway: str) -> None:
    deadline = time.monotonic() + hang_bound(10.0)
    while time.monotonic() < deadline:
        if condition(await _ejected(session, gateway)):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("ejection state did not change in time")


async def _attempts(session: aiohttp.ClientSession, gateway: str, backend: str) -> int:
    """Upstream attempts the gateway made on ``backend`` (all outcomes), from /metrics."""
    return int(await backend_total(session, gateway, "meridian_upstream_attempts_total", backend))


async def _until_served_by(session: aiohttp.ClientSession, gateway: str, backend: str) -> bool:
    deadline = time.monotonic() + hang_bound(8.0)
    while time.monotonic() < deadline:
        reply = await chat(session, gateway, MODEL, user(unique_prompt(50)))
        if reply.backend == backend:
            return True
        await asyncio.sleep(0.05)
    return False
