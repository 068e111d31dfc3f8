"""Acceptance 10: SIGTERM during 50 live streams, against a real ``meridian serve`` process."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.reliability.support import (
    FAST_ENGINE,
    SETTLE_S,
    EmulatorFactory,
    SseReply,
    chat,
    config_data,
    serve_process,
    wait_for,
    write_config,
)

# Streams outlast the steps between SIGTERM and the late request by seconds, so the gateway is
# still there to refuse it however busy the machine is.
SLOW = FAST_ENGINE.model_copy(update={"decode_base_ms": 60.0})
STREAMS = 50


async def _stream(
    session: aiohttp.ClientSession, url: str, tokens: int, started: asyncio.Queue[None]
) -> SseReply:
    async with session.post(url + "/v1/chat/completions", json=chat(max_tokens=tokens)) as r:
        first = await r.content.readany()
        started.put_nowait(None)
        raw = first + await r.read()
    return SseReply(r.status, dict(r.headers), [e for e in raw.split(b"\n\n") if e], raw)


async def _run_drain(
    tmp_path: Path, emulator: EmulatorFactory, tokens: int, drain: dict[str, Any]
) -> tuple[list[SseReply], int, int, dict[str, Any], int]:
    backend = await emulator("b1", engine=SLOW)
    path = tmp_path / "gateway.yaml"
    write_config(path, config_data({"b1": backend.url}, drain=drain))
    async with serve_process(path) as gw, aiohttp.ClientSession() as session:
        started: asyncio.Queue[None] = asyncio.Queue()
        streams = [
            asyncio.ensure_future(_stream(session, gw.url, tokens, started)) for _ in range(STREAMS)
        ]
        for _ in range(STREAMS):
            await asyncio.wait_for(started.get(), 10)
        gw.signal(signal.SIGTERM)
        await wait_for(lambda: "draining: readiness failing" in gw.log(), SETTLE_S)
        async with session.get(gw.admin_url + "/readyz") as ready:
            ready_status, ready_body = ready.status, await ready.json()
        await wait_for(lambda: "draining: refusing new requests" in gw.log(), SETTLE_S)
        async with aiohttp.ClientSession() as fresh:
            async with fresh.post(gw.url + "/v1/chat/completions", json=chat()) as late:
                late_status, late_body = late.status, orjson.loads(await late.read())
        replies = await asyncio.gather(*streams)
        code = await asyncio.wait_for(gw.process.wait(), 10)
    assert late_body["error"]["code"] == "gateway_draining"
    return replies, code, ready_status, ready_body, late_status


async def test_sigterm_lets_50_live_streams_finish_refuses_new_ones_and_exits_0(
    tmp_path: Path, emulator: EmulatorFactory
) -> None:
    replies, code, ready, ready_body, late = await _run_drain(
        tmp_path, emulator, 40, {"deadline_s": 10, "readiness_grace_s": 0.1}
    )
    assert ready == 503 and ready_body["draining"] is True
    assert late == 503
    assert all(r.status == 200 and r.done and r.tokens == 40 for r in replies)
    assert code == 0


async def test_drain_deadline_ends_the_rest_with_an_error_event(
    tmp_path: Path, emulator: EmulatorFactory
) -> None:
    replies, code, _, _, late = await _run_drain(tmp_path, emulator, 500, {"deadline_s": 2.0})
    assert late == 503
    for reply in replies:
        assert reply.status == 200 and not reply.done and reply.tokens >= 1
        assert [e["code"] for e in reply.errors()] == ["gateway_draining"]
    assert code == 0
