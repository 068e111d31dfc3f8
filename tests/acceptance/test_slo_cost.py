"""Issue 17 acceptance with real processes (``meridian emulate`` + ``meridian serve``): an
objective that selects the cheaper backend, one that forces the expensive one, and a deadline
refused before any upstream connection (the emulators' counters see no request)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.acceptance.conftest import Stack
from tests.acceptance.harness import (
    Process,
    admin,
    gateway_config,
    start_fleet,
    start_gateway,
    wait_for_signals,
)

FLEET = Path(__file__).parent / "fleets" / "slo.yaml"
MODEL = "m"
PRICES = {
    "local-premium": {"prompt_per_mtok": 5.0, "completion_per_mtok": 20.0},
    "remote-cheap": {"prompt_per_mtok": 0.5, "completion_per_mtok": 2.0},
}
OBJECTIVES = {
    "classes": {"interactive": {"ttft_ms": 80}, "batch": {"ttft_ms": 10_000}},
    "tenants": {"nightly": "batch"},
    "default_class": "interactive",
    "early_rejection": {"header": {"allow": True, "min_ms": 1}},
}


@pytest.fixture(scope="module")
def slo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("slo")
    fleet, nodes = start_fleet(FLEET, "us-east", workdir)
    processes: list[Process] = [fleet]
    try:
        signals = {"probes": {"interval_s": 1.0}, "engine_metrics": {"interval_s": 0.3}}
        config = gateway_config(
            FLEET,
            "us-east",
            nodes,
            signals,
            routing={"policy": "slo_cost"},
            objectives=OBJECTIVES,
        )
        for backend in config["backends"]:
            backend["price"] = PRICES[backend["name"]]
        gateway, url = start_gateway(config, workdir, "slo")
        processes.append(gateway)
        yield Stack(url, nodes, config, workdir)
    finally:
        for process in reversed(processes):
            process.stop()


async def _chat(
    session: aiohttp.ClientSession, gateway: str, headers: dict[str, str]
) -> tuple[int, str, str, dict[str, Any] | None]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "how far is it?"}],
        "max_tokens": 4,
        "stream": True,
    }
    url = f"{gateway}/v1/chat/completions"
    async with session.post(url, json=body, headers=headers) as response:
        await response.read()
        error = None if response.status == 200 else (await response.json())["error"]
        return (
            response.status,
            response.headers.get("X-Meridian-Route", ""),
            response.headers.get("Retry-After", ""),
            error,
        )


async def _requests(session: aiohttp.ClientSession, stack: Stack) -> dict[str, int]:
    return {
        name: (await admin(session, node, "stats"))["requests"]
        for name, node in stack.nodes.items()
    }


async def test_a_loose_objective_selects_the_cheaper_backend(slo: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        await wait_for_signals(session, slo.gateway, MODEL)
        routes = [
            (await _chat(session, slo.gateway, {"X-Meridian-Tenant": "nightly"}))[:2]
            for _ in range(5)
        ]
    assert all(status == 200 and "backend=remote-cheap" in route for status, route in routes)


async def test_a_tight_objective_forces_the_expensive_backend(slo: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        await wait_for_signals(session, slo.gateway, MODEL)
        routes = [(await _chat(session, slo.gateway, {}))[:2] for _ in range(5)]
    assert all(status == 200 and "backend=local-premium" in route for status, route in routes)


async def test_an_unmeetable_deadline_is_refused_before_any_upstream_connection(
    slo: Stack,
) -> None:
    async with aiohttp.ClientSession() as session:
        await wait_for_signals(session, slo.gateway, MODEL)
        before = await _requests(session, slo)
        status, _, retry_after, error = await _chat(
            session,
            slo.gateway,
            {"X-Meridian-Deadline-Ms": "1"},  # below the round trip alone
        )
        after = await _requests(session, slo)
    assert status == 503 and int(retry_after) >= 1
    assert error is not None and error["code"] == "deadline_unmeetable"
    assert after == before  # neither emulator saw the request
