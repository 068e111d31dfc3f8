"""SSE framing and per-hop timing, read with a raw HTTP client."""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp
import orjson
from aiohttp import web

from gateway.timing import parse
from loadtests.emulator.config import FaultConfig
from tests.gateway.support import MODEL, config_for
from tests.servers import post_bytes, serving

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def _read_sse(response: aiohttp.ClientResponse) -> list[str]:
    text = (await response.read()).decode()
    return [block for block in text.split("\n\n") if block]


async def test_stream_headers_and_final_timing_comment(emulator, gateway) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        async with session.post(
            running.url + "/v1/chat/completions",
            json={**CHAT, "max_tokens": 6},
            headers={"X-Request-Id": "req-123", "Accept": "application/json"},
        ) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            assert response.headers["X-Request-Id"] == "req-123"
            route = response.headers["X-Meridian-Route"]
            assert "backend=b1" in route and "region=local" in route and "attempts=1" in route
            assert "kind=dedicated" in route
            names = [e.name for e in parse(response.headers["Server-Timing"])]
            assert names[:5] == ["gw", "route", "upstream_connect", "upstream_ttfb", "ttft"]
            events = await _read_sse(response)
    assert events[-1] == "data: [DONE]"
    timing_line = events[-2]
    assert timing_line.startswith(": meridian-timing ")
    summary = orjson.loads(timing_line.removeprefix(": meridian-timing "))
    assert summary["backend"] == "b1"
    assert summary["output_tokens"] == 6
    for key in ("ttft_ms", "itl_p50_ms", "itl_p99_ms", "itl_max_ms", "e2e_ms"):
        assert summary[key] is not None and summary[key] >= 0
    assert summary["e2e_ms"] >= summary["ttft_ms"]
    # The backend's own phases (the emulator's trailing ": server-timing" comment) are folded
    # into the summary under its name, not relayed as a second comment.
    assert {"b1.engine_queue", "b1.engine_prefill", "b1.engine_decode"} <= set(
        summary["upstream_timing"]
    )
    assert not any(e.startswith(": server-timing") for e in events)
    data_events = [e for e in events if e.startswith("data: {")]
    assert len(data_events) >= 6


async def test_generated_request_id_when_client_sends_garbage(emulator, gateway) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        async with session.post(
            running.url + "/v1/chat/completions",
            json={**CHAT, "stream": False},
            headers={"X-Request-Id": "bad id with spaces\u00e9"},
        ) as response:
            assert response.status == 200
            request_id = response.headers["X-Request-Id"]
            assert request_id != "bad id with spaces\u00e9" and len(request_id) == 32
            names = [e.name for e in parse(response.headers["Server-Timing"])]
            assert "e2e" in names and "ttft" in names
            summary = orjson.loads(response.headers["X-Meridian-Timing"])
            assert summary["backend"] == "b1" and summary["output_tokens"] == 8
            body = await response.json()
            assert body["object"] == "chat.completion"


async def test_headers_wait_for_the_first_token(emulator, gateway) -> None:
    backend = await emulator("b1", faults=FaultConfig(stall_ms=400.0))
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        async with session.post(running.url + "/v1/chat/completions", json=CHAT) as response:
            headers_after = time.perf_counter() - started
            ttft = {e.name: e.dur_ms for e in parse(response.headers["Server-Timing"])}["ttft"]
            await response.read()
    assert headers_after >= 0.39
    assert ttft is not None and ttft >= 390


async def test_upstream_server_timing_is_kept_as_next_hop(emulator, gateway) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Server-Timing": 'queue;dur=12.5, engine;desc="x"'})
        response.content_type = "text/event-stream"
        await response.prepare(request)
        chunk = {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]}
        await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    async with serving(app) as url:
        running = await gateway(config_for({"hop-b": url}))
        async with aiohttp.ClientSession() as session:
            async with session.post(running.url + "/v1/chat/completions", json=CHAT) as response:
                entries = parse(response.headers["Server-Timing"])
                await response.read()
        by_name = {e.name: e for e in entries}
        assert by_name["hop-b.queue"].dur_ms == 12.5
        assert by_name["hop-b.engine"].desc == "x"
        assert "gw" in by_name


def _pipelined_chat(host: str, max_tokens: int, close: bool) -> bytes:
    body = orjson.dumps({**CHAT, "max_tokens": max_tokens})
    return post_bytes(host, "/v1/chat/completions", body, close=close)


async def test_a_request_is_timed_from_its_head_not_from_its_handler(emulator, gateway) -> None:
    # Two requests pipelined in one write arrive in one read; aiohttp runs the second only
    # after the first has streamed to its end. The second waited in the gateway that whole
    # time, so its ttft (and gw) count from when its head was read, and cover the first's e2e.
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    host_port = running.url.removeprefix("http://")
    host, port = host_port.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            _pipelined_chat(host_port, 24, close=False) + _pipelined_chat(host_port, 2, close=True)
        )
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(-1), 30)  # the second closes the connection
    finally:
        writer.close()
        await writer.wait_closed()
    first, second = raw.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200") and second.startswith(b"200")
    summary = re.search(rb": meridian-timing (\{[^\n]*\})\n", first)
    assert summary is not None
    first_e2e_ms = orjson.loads(summary.group(1))["e2e_ms"]
    head = second.split(b"\r\n\r\n", 1)[0].decode()
    (timing,) = [line for line in head.split("\r\n") if line.lower().startswith("server-timing:")]
    entries = {entry.name: entry.dur_ms for entry in parse(timing.split(":", 1)[1])}
    # The first's e2e ends before the second's handler starts; the summary rounds to 0.001 ms.
    assert entries["gw"] is not None and entries["gw"] >= first_e2e_ms - 0.001
    assert entries["ttft"] is not None and entries["ttft"] > entries["gw"]
