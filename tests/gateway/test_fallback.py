"""Failures before the first token move to the next candidate; total failure is an honest error."""

from __future__ import annotations

import aiohttp

from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from tests.gateway.support import MODEL, config_for
from tests.servers import refusing_port, settle

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}


# Fallback order must be predictable here: round-robin's first turn goes to the first name.
ROUND_ROBIN = {"policy": "round_robin"}


async def _stream(url: str) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=CHAT) as response:
            return response.status, dict(response.headers), await response.read()


async def test_refused_backend_falls_back_to_the_next(emulator, gateway) -> None:
    good = await emulator("b-good")
    urls = {"a-refused": f"http://127.0.0.1:{refusing_port()}", "b-good": good.url}
    running = await gateway(config_for(urls, routing=ROUND_ROBIN))
    status, headers, body = await _stream(running.url)
    assert status == 200
    assert "backend=b-good" in headers["X-Meridian-Route"]
    assert "attempts=2" in headers["X-Meridian-Route"]
    assert body.endswith(b"data: [DONE]\n\n")
    assert running.app[RELAY].fleet.in_flight("a-refused") == 0


async def test_503_then_success(emulator, gateway) -> None:
    bad = await emulator("a-503", faults=FaultConfig(unavailable_rate=1.0))
    good = await emulator("b-good")
    running = await gateway(config_for({"a-503": bad.url, "b-good": good.url}, routing=ROUND_ROBIN))
    status, headers, body = await _stream(running.url)
    assert status == 200 and "attempts=2" in headers["X-Meridian-Route"]
    assert body.count(b'"content"') >= 1
    assert bad.stats.requests == 1 and good.stats.requests == 1


async def test_first_token_timeout_moves_on_and_cancels_the_slow_one(emulator, gateway) -> None:
    slow = await emulator("a-slow", faults=FaultConfig(stall_ms=5_000.0))
    good = await emulator("b-good")
    config = config_for(
        {"a-slow": slow.url, "b-good": good.url},
        timeouts={"first_token_s": 0.3},
        routing=ROUND_ROBIN,
    )
    running = await gateway(config)
    status, headers, _ = await _stream(running.url)
    assert status == 200 and "backend=b-good" in headers["X-Meridian-Route"]
    await settle(lambda: slow.stats.cancelled > 0)  # the gateway hangs up after the client's end
    assert slow.stats.cancelled == 1


async def test_all_backends_failing_is_a_real_error_not_a_200(emulator, gateway) -> None:
    a = await emulator("a", faults=FaultConfig(error_rate=1.0))
    b = await emulator("b", faults=FaultConfig(error_rate=1.0))
    running = await gateway(config_for({"a": a.url, "b": b.url}, routing=ROUND_ROBIN))
    status, _, body = await _stream(running.url)
    assert status == 502
    assert b'"error"' in body and b"all 2 attempts" in body


async def test_all_rate_limited_is_429_with_retry_after(emulator, gateway) -> None:
    a = await emulator("a", faults=FaultConfig(rate_limit_rate=1.0, retry_after_s=3))
    running = await gateway(config_for({"a": a.url}, routing=ROUND_ROBIN))
    status, headers, body = await _stream(running.url)
    assert status == 429
    assert headers["Retry-After"] == "3"
    assert b"rate_limit" in body


async def test_nothing_listening_anywhere_is_503(gateway) -> None:
    running = await gateway(config_for({"a": f"http://127.0.0.1:{refusing_port()}"}))
    status, headers, body = await _stream(running.url)
    assert status == 503 and "Retry-After" in headers
    assert b"no_backend_available" in body
