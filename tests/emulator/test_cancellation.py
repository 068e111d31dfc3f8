"""A client that hangs up frees its engine slot, in every phase, before the request would have
finished (how fast is a measurement, not a test: the machine may be busy)."""

from __future__ import annotations

import asyncio

from tests.emulator.helpers import chat, raw_post, wait_until


async def _hang_up_and_check(emulator, writer, before_cancelled: int = 0) -> None:
    completed = emulator.stats.completed
    writer.close()
    await wait_until(lambda: emulator.stats.cancelled == before_cancelled + 1)
    assert emulator.stats.completed == completed  # cancelled, not run to its end
    await wait_until(lambda: emulator.stats.running == 0 and emulator.stats.waiting == 0)


async def test_cancel_while_queued(start) -> None:
    emulator = await start(engine={"max_num_seqs": 1})
    _, first = await raw_post(emulator.url, "/v1/chat/completions", chat(max_tokens=2000))
    await wait_until(lambda: emulator.stats.running == 1)
    _, second = await raw_post(
        emulator.url, "/v1/chat/completions", chat(max_tokens=5, stream=True)
    )
    await wait_until(lambda: emulator.stats.waiting == 1)
    second.close()
    await wait_until(lambda: emulator.stats.cancelled == 1 and emulator.stats.waiting == 0)
    assert emulator.stats.running == 1  # the first request is untouched
    await _hang_up_and_check(emulator, first, before_cancelled=1)


async def test_cancel_while_prefilling(start) -> None:
    # 4,000 tokens at 1,000 tokens/s: a 4 s prefill step, so the hang-up lands inside it.
    emulator = await start(engine={"prefill_tokens_per_s": 1000, "max_num_batched_tokens": 8192})
    _, writer = await raw_post(
        emulator.url, "/v1/chat/completions", chat("x" * 16_000, max_tokens=5, stream=True)
    )
    await wait_until(lambda: emulator.stats.running == 1)
    await asyncio.sleep(0.2)
    await _hang_up_and_check(emulator, writer)


async def test_cancel_while_decoding(start) -> None:
    emulator = await start()
    reader, writer = await raw_post(
        emulator.url, "/v1/chat/completions", chat(max_tokens=1000, stream=True)
    )
    for _ in range(3):  # headers, role chunk, then real tokens
        await reader.readuntil(b"\n\n")
    assert emulator.stats.running == 1
    await _hang_up_and_check(emulator, writer)


async def test_cancel_non_streaming(start) -> None:
    emulator = await start()
    _, writer = await raw_post(
        emulator.url, "/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 1000}
    )
    await wait_until(lambda: emulator.stats.running == 1)
    await asyncio.sleep(0.1)
    await _hang_up_and_check(emulator, writer)
    assert emulator.stats.completed == 0
