"""Acceptance 3 and 4, plus malformed SSE: after the first token, an error event and no [DONE]."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from loadtests.emulator.config import FaultConfig
from tests.reliability.support import (
    MODEL,
    SETTLE_S,
    EmulatorFactory,
    GatewayFactory,
    chat,
    config_for,
    metric_value,
    post,
    wait_for,
)

TOKEN = (
    b'data: {"id":"x","object":"chat.completion.chunk","model":"' + MODEL.encode() + b'",'
    b'"choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}\n\n'
)


async def test_upstream_dies_after_n_tokens_error_event_no_done_no_retry(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    dying = await emulator("a-dies", faults=FaultConfig(die_after_tokens=3))
    spare = await emulator("b-spare")
    running = await gateway(config_for({"a-dies": dying.url, "b-spare": spare.url}))
    reply = await post(running.url, chat(max_tokens=10))
    assert reply.status == 200
    assert reply.tokens == 3
    assert not reply.done
    [error] = reply.errors()
    assert error["code"] == "upstream_disconnected" and error["type"] == "server_error"
    assert reply.events[-1].startswith(b": meridian-timing ")  # partial usage is still reported
    assert b'"output_tokens":3' in reply.events[-1]
    assert spare.stats.requests == 0, "no transparent retry after the first token"
    labels = {"backend": "a-dies", "kind": "upstream_disconnected"}
    assert metric_value(running, "meridian_stream_errors_total", labels) == 1


async def test_inter_token_stall_ends_with_an_error_event_after_the_idle_timeout(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    slow = await emulator("a-drip", faults=FaultConfig(drip_ms=10_000.0))
    config = config_for({"a-drip": slow.url}, timeouts={"inter_token_s": 0.3})
    running = await gateway(config)
    started = asyncio.get_running_loop().time()
    reply = await post(running.url, chat(max_tokens=5))
    elapsed = asyncio.get_running_loop().time() - started
    assert reply.status == 200 and reply.tokens == 1 and not reply.done
    [error] = reply.errors()
    assert error["code"] == "upstream_stalled"
    assert 0.3 <= elapsed < 10.0  # ended by the idle timeout, not by the next token
    # the stalled generation was cancelled upstream
    await wait_for(lambda: slow.stats.cancelled == 1, SETTLE_S)


async def test_route_class_overrides_the_inter_token_timeout(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    slow = await emulator("a-drip", faults=FaultConfig(drip_ms=400.0))
    config = config_for(
        {"a-drip": slow.url},
        timeouts={"inter_token_s": 0.2},
        route_classes={"long_form": {"timeouts": {"inter_token_s": 2.0}}},
    )
    running = await gateway(config)
    interactive = await post(running.url, chat(max_tokens=2))
    assert interactive.errors()[0]["code"] == "upstream_stalled"
    # max_tokens >= 1024 makes the request long_form: 0.4 s gaps are within its 2 s timeout.
    async with aiohttp.ClientSession() as session:
        body = chat(max_tokens=2048)
        async with session.post(running.url + "/v1/chat/completions", json=body) as response:
            seen = b""
            while seen.count(b'"content":"tok') + seen.count(b'"content":" ') < 2:
                chunk = await asyncio.wait_for(response.content.readany(), 2.0)
                assert chunk, "stream ended early"
                seen += chunk
            assert b'"error"' not in seen
    await wait_for(lambda: slow.stats.cancelled == 2)


@pytest.fixture
async def scripted_upstream() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A backend that sends the scripted bytes, one write each, then closes."""
    script: list[bytes] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in script:
            await response.write(chunk)
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", script
    await runner.cleanup()


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (b"data: {this is not json\n\n", "upstream_malformed"),
        (b'data: {"error": {"message": "engine OOM", "code": 500}}\n\n', "upstream_error_event"),
        (TOKEN[:40], "upstream_truncated"),
    ],
)
async def test_malformed_or_error_after_first_token_is_an_error_event(
    scripted_upstream: tuple[str, list[bytes]], gateway: GatewayFactory, bad: bytes, code: str
) -> None:
    url, script = scripted_upstream
    script[:] = [TOKEN, TOKEN, bad, TOKEN, b"data: [DONE]\n\n"]
    if code == "upstream_truncated":
        script[:] = [TOKEN, bad]
    running = await gateway(config_for({"scripted": url}))
    reply = await post(running.url, chat())
    assert reply.status == 200
    assert reply.tokens == 2 if code != "upstream_truncated" else reply.tokens == 1
    assert not reply.done
    assert [e["code"] for e in reply.errors()] == [code]
    if code == "upstream_error_event":
        # Meridian's words only: the upstream's text stays in the log (gateway/scrub.py).
        assert "engine OOM" not in reply.errors()[0]["message"]
