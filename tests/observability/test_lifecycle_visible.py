"""A request that seems stuck says where it is: the admin status lists the live requests by
lifecycle state (the oldest with their id, state and live attempts), and every request line
says the state it ended in and the live state it ended from."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from loadtests.emulator.config import FaultConfig
from tests.gateway.support import MODEL, config_for
from tests.observability.support import CapturedLog, until


def _chat(max_tokens: int = 4) -> dict[str, object]:
    messages = [{"role": "user", "content": "hi"}]
    return {"model": MODEL, "messages": messages, "stream": True, "max_tokens": max_tokens}


async def _requests(session: aiohttp.ClientSession, admin_url: str) -> dict[str, Any]:
    async with session.get(admin_url + "/status.json") as response:
        assert response.status == 200
        data: dict[str, Any] = (await response.json())["requests"]
        return data


async def test_a_waiting_request_shows_its_state_and_its_line_where_it_ended(
    emulator, gateway, captured: CapturedLog
) -> None:
    stuck = await emulator("b1", faults=FaultConfig(stall_ms=600_000.0))
    running = await gateway(config_for({"b1": stuck.url}))
    url = running.url + "/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        headers = {"X-Request-Id": "req-stuck"}
        task = asyncio.ensure_future(session.post(url, json=_chat(), headers=headers))
        await until(lambda: stuck.stats.requests >= 1)
        live = await _requests(session, running.admin_url)
        assert live["live"] == 1 and live["by_state"] == {"awaiting_first_token": 1}
        [oldest] = live["oldest"]
        assert (oldest["request_id"], oldest["state"], oldest["live_attempts"]) == (
            "req-stuck",
            "awaiting_first_token",
            1,
        )
        assert oldest["age_s"] >= 0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        (line,) = await captured.wait_requests(1)
        assert (line["lifecycle"], line["ended_from"]) == ("cancelled", "awaiting_first_token")
        assert (await _requests(session, running.admin_url))["live"] == 0


async def test_a_completed_request_ended_done_from_streaming(
    emulator, gateway, captured: CapturedLog
) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + "/v1/chat/completions", json=_chat()) as response:
            assert response.status == 200
            await response.read()
        (line,) = await captured.wait_requests(1)
        assert (line["lifecycle"], line["ended_from"]) == ("done", "streaming")
        assert (await _requests(session, running.admin_url)) == {
            "live": 0,
            "by_state": {},
            "oldest": [],
        }
