"""Routing learns a request's TTFT when its first token arrives, not when the stream ends."""

from __future__ import annotations

import aiohttp

from tests.gateway.support import FAST_ENGINE, MODEL, config_for


async def _learned_ms(session: aiohttp.ClientSession, url: str) -> float:
    """What routing has learned about the backend: the terms that observation moves (the
    queue and step terms also move with our own in-flight request, so they are left out)."""
    async with session.get(
        url + "/v1/meridian/route", params={"model": MODEL, "prompt": "hi"}
    ) as response:
        report = await response.json()
    terms = report["candidates"][0]["terms"]
    return float(sum(terms[name]["ms"] for name in ("bias", "prefill") if name in terms))


async def test_prediction_moves_while_the_stream_is_still_open(emulator, gateway) -> None:
    # The backend is far slower to its first token than configured (10 ms overhead).
    engine = FAST_ENGINE.model_copy(
        update={"first_token_overhead_ms": 250.0, "decode_base_ms": 20.0}
    )
    backend = await emulator("b1", engine=engine)
    running = await gateway(config_for({"b1": backend.url}))
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": 200,  # about 4 s of tokens after the first
    }
    async with aiohttp.ClientSession() as session:
        before = await _learned_ms(session, running.url)
        async with session.post(running.url + "/v1/chat/completions", json=body) as response:
            assert response.status == 200
            await response.content.readany()  # the first token is here; the stream is not over
            during = await _learned_ms(session, running.url)
            assert backend.stats.completed == 0
    assert during > before + 5.0, (before, during)
