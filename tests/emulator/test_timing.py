"""Per-request engine phases: a Server-Timing header (non-streaming) or a trailing SSE comment."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from loadtests.emulator.timing import SSE_COMMENT_PREFIX
from tests.emulator.helpers import chat

# 10 ms overhead; 400 prompt tokens at 20,000/s = 20 ms prefill; 5 ms per decode step.
ENGINE = {
    "first_token_overhead_ms": 10.0,
    "prefill_tokens_per_s": 20_000.0,
    "decode_base_ms": 5.0,
    "decode_per_seq_ms": 0.0,
    "max_num_seqs": 1,
}
PROMPT = "x" * (400 * 4 - 6)  # 400 tokens with the chat framing


def _durations(header: str) -> dict[str, float]:
    out = {}
    for entry in header.split(","):
        name, dur = entry.strip().split(";dur=")
        out[name] = float(dur)
    return out


async def test_non_streaming_response_carries_the_engine_phases(start) -> None:
    emulator = await start(engine=ENGINE)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            emulator.url + "/v1/chat/completions", json=chat(PROMPT, max_tokens=5)
        ) as resp,
    ):
        await resp.read()
        phases = _durations(resp.headers["Server-Timing"])
    assert phases["engine_overhead"] == pytest.approx(10.0, abs=0.5)
    assert phases["engine_queue"] == 0.0  # idle engine: scheduled the moment it was eligible
    assert phases["engine_prefill"] == pytest.approx(20.0)
    assert phases["engine_decode"] == pytest.approx(4 * 5.0)
    assert phases["emit_lag"] >= 0.0  # how late depends on the machine's load


async def _stream_lines(session: aiohttp.ClientSession, url: str, prompt: str) -> list[bytes]:
    body = chat(prompt, max_tokens=20, stream=True, stream_options={"include_usage": True})
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert "Server-Timing" not in resp.headers  # sent before the first token: nothing known
        return [line.rstrip(b"\n") async for line in resp.content if line.strip()]


async def test_stream_ends_with_a_server_timing_comment_and_the_queue_shows(start) -> None:
    emulator = await start(engine=ENGINE)
    async with aiohttp.ClientSession() as session:
        # One batch slot: the second request queues behind the first one's whole generation.
        first, second = await asyncio.gather(
            _stream_lines(session, emulator.url, PROMPT),
            _stream_lines(session, emulator.url, "y" * len(PROMPT)),
        )
        async with session.get(emulator.url + "/metrics") as resp:
            metrics = await resp.text()
    for lines in (first, second):
        assert lines[-1] == b"data: [DONE]"
        assert b'"usage"' in lines[-3]
        assert lines[-2].startswith(SSE_COMMENT_PREFIX)
    queues = []
    for lines in (first, second):
        phases = _durations(lines[-2].removeprefix(SSE_COMMENT_PREFIX).decode())
        assert phases["engine_prefill"] == pytest.approx(20.0)
        assert phases["engine_decode"] == pytest.approx(19 * 5.0)
        queues.append(phases["engine_queue"])
    # The one behind waited for the first one's prefill + decode (115 ms), less however much
    # later the client sent it.
    assert min(queues) == 0.0 and 0.0 < max(queues) <= 20.0 + 95.0 + 0.5
    assert "meridian_emulator_emit_lag_max_seconds_count 2.0" in metrics
    assert "meridian_emulator_emitted_events_total 42.0" in metrics  # 20 tokens + finish, x2
