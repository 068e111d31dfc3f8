"""A first token that waited unread in the kernel while the gateway's loop was busy is the
gateway's time, not the backend's (gateway/read_lag.py): ``upstream_ttfb``, which routing
learns, leaves it out, and ``upstream_read_lag`` (Server-Timing) and ``upstream_read_lag_ms``
(the request log) show it. The loop is held over the backend's answer by tests/held_loop.py."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from gateway.read_lag import FLOOR_MS
from gateway.timing import parse
from tests.gateway.support import MODEL, config_for
from tests.held_loop import HeldAnswer, thread_backend
from tests.observability.support import CapturedLog

HOLD_S = 0.3
CHAT_PATH = "/v1/chat/completions"


def _chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": MODEL, "choices": [choice]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


STREAM = b"".join(
    [
        _chunk({"role": "assistant"}),
        _chunk({"content": "Hello"}),
        _chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]
)
ANSWERS = {
    ("GET", "/v1/models"): ("application/json", b'{"object": "list", "data": []}'),
    ("POST", CHAT_PATH): ("text/event-stream", STREAM),
}


async def test_a_first_token_the_busy_loop_left_unread_is_not_the_backends_time(
    gateway, captured: CapturedLog
) -> None:
    held = HeldAnswer(asyncio.get_running_loop(), HOLD_S)
    with thread_backend(held, ANSWERS) as url:
        running = await gateway(config_for({"b1": url}))
        held.arm(CHAT_PATH)
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
        async with (
            aiohttp.ClientSession() as session,
            session.post(running.url + "/v1/chat/completions", json=body) as response,
        ):
            assert response.status == 200
            timing = {e.name: e.dur_ms or 0.0 for e in parse(response.headers["Server-Timing"])}
            text = (await response.read()).decode()
    assert '"content":"Hello"' in text and text.endswith("data: [DONE]\n\n")
    # The stream sat in the kernel for HOLD_S; the kernel counts in ticks of up to 10 ms.
    hold_ms = HOLD_S * 1000.0
    assert timing["upstream_read_lag"] >= hold_ms - FLOOR_MS
    assert timing["ttft"] >= hold_ms
    assert timing["upstream_ttfb"] <= timing["ttft"] - (hold_ms - FLOOR_MS)
    assert timing["gw"] >= hold_ms - FLOOR_MS  # the wait is the gateway's own time
    (line,) = await captured.wait_requests(1)
    assert line["upstream_read_lag_ms"] == pytest.approx(timing["upstream_read_lag"], abs=0.01)
    assert line["upstream_ttfb_ms"] == pytest.approx(timing["upstream_ttfb"], abs=0.01)
