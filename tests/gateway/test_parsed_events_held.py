"""An open HTTP stream holds no parsed JSON of its events: the HTTP door writes the bytes as
they came, so the parse that checked an event is let go. Only a gRPC exchange keeps it
(``SseEvent.parsed``: the door builds its messages from it). Held, it would cost every open
stream ~1 KB for each event its door or the relay still refers to (the first read's, at least).
"""

from __future__ import annotations

import asyncio
import gc

import aiohttp

from tests.gateway.support import FAST_ENGINE, MODEL, EmulatorFactory, GatewayFactory, config_for

STREAMS = 10


def _parsed_chunks_alive() -> int:
    """Chunk objects of this test's backend (its chunk ids name it) still referred to."""
    gc.collect()  # what only the collector would free is not held
    return sum(
        1
        for o in gc.get_objects()
        if type(o) is dict and str(o.get("id", "")).startswith("chatcmpl-held-")
    )


async def test_open_http_streams_hold_no_parsed_event(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    slow = FAST_ENGINE.model_copy(update={"decode_base_ms": 1_000.0})  # a token a second
    backend = await emulator("held", engine=slow)  # its chunks' ids: chatcmpl-held-N
    running = await gateway(config_for({"held": backend.url}))
    first_tokens: asyncio.Queue[None] = asyncio.Queue()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}

    async def one(session: aiohttp.ClientSession) -> None:
        async with session.post(running.url + "/v1/chat/completions", json=body) as answer:
            async for line in answer.content:
                if b'"content":"' in line and b'"content":""' not in line:
                    first_tokens.put_nowait(None)
                    await asyncio.Event().wait()  # open until cancelled

    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(one(session)) for _ in range(STREAMS)]
        try:
            for _ in range(STREAMS):
                await first_tokens.get()
            alive = _parsed_chunks_alive()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    assert alive == 0
