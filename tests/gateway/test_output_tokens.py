"""``output_tokens`` and the ITL gaps count generated tokens, not events: for every engine's
chunk shapes, the finish-only chunk and the role announcement are not tokens.

Each upstream here is a loopback aiohttp server replaying one engine's stream, chunk for chunk,
as that engine sends it without ``include_usage`` (shapes from vLLM 0.11, SGLang 0.5, TGI 3.3,
llama.cpp b6000 servers)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from gateway.app import start_gateway
from tests.gateway.support import MODEL, config_for
from tests.servers import serving

_HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL}


def _chat(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {**_HEAD, "choices": [{**choice, **extra}]}


def _text(text: str, finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {**_HEAD, "object": "text_completion", "choices": [choice]}


_SGLANG_EMPTY = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
# (engine, chunks, tokens the stream carried)
STREAMS: list[tuple[str, list[dict[str, Any]], int]] = [
    (
        "vllm",  # role chunk, tokens, a last chunk with empty content and the finish
        [
            _chat({"role": "assistant", "content": ""}),
            _chat({"content": "Hel"}),
            _chat({"content": "lo"}),
            _chat({"content": ""}, "stop", stop_reason=None),
        ],
        2,
    ),
    (
        "sglang",  # nulls everywhere, the finish on a delta of nulls
        [
            _chat({"role": "assistant", "content": ""}),
            _chat({**_SGLANG_EMPTY, "content": "Hel"}),
            _chat({**_SGLANG_EMPTY, "content": "lo"}),
            _chat(_SGLANG_EMPTY, "stop", matched_stop=2),
        ],
        2,
    ),
    (
        "tgi",  # every chunk repeats the role; the last token arrives with the finish
        [
            _chat({"role": "assistant", "content": "Hel"}),
            _chat({"role": "assistant", "content": "lo"}),
            _chat({"role": "assistant", "content": "!"}, "length"),
        ],
        3,
    ),
    (
        "llamacpp",  # content null in the role chunk, the finish on an empty delta
        [
            _chat({"role": "assistant", "content": None}),
            _chat({"content": "Hel"}),
            _chat({"content": "lo"}),
            _chat({}, "stop"),
        ],
        2,
    ),
    (
        "tool-call",  # a tool call's argument fragments are output too
        [
            _chat({"role": "assistant", "content": None}),
            _chat({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f"}}]}),
            _chat({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
            _chat({}, "tool_calls"),
        ],
        2,
    ),
    ("completions", [_text("Hel"), _text("lo"), _text("", "length")], 2),
    ("empty-generation", [_chat({"role": "assistant", "content": ""}), _chat({}, "stop")], 0),
]


@contextlib.asynccontextmanager
async def _replaying(chunks: list[dict[str, Any]]) -> AsyncIterator[str]:
    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    app.router.add_post("/v1/completions", handle)
    async with serving(app) as url:
        yield url


def _summary(raw: bytes) -> dict[str, Any]:
    prefix = b": meridian-timing "
    lines = [line for line in raw.split(b"\n") if line.startswith(prefix)]
    assert len(lines) == 1, raw
    summary: dict[str, Any] = orjson.loads(lines[0][len(prefix) :])
    return summary


@pytest.mark.parametrize(("engine", "chunks", "tokens"), STREAMS, ids=[s[0] for s in STREAMS])
async def test_output_tokens_counts_only_chunks_with_output(
    engine: str, chunks: list[dict[str, Any]], tokens: int
) -> None:
    async with _replaying(chunks) as url:
        gateway = await start_gateway(config_for({engine: url}), "127.0.0.1", 0)
        try:
            body: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}]}
            path = "/v1/chat/completions"
            if engine == "completions":
                path, body = "/v1/completions", {"prompt": "x"}
            async with aiohttp.ClientSession() as session:
                async with session.post(
                    gateway.url + path, json={"model": MODEL, "stream": True, **body}
                ) as response:
                    assert response.status == 200
                    raw = await response.read()
        finally:
            await gateway.close()
    summary = _summary(raw)
    assert summary["output_tokens"] == tokens
    # n tokens have n - 1 gaps between them: none gives no statistics, one gives p50 == max
    # (a counted finish chunk would add a second, ~0 ms gap and pull p50 down to it)
    if tokens <= 1:
        assert summary["itl_max_ms"] is None
    elif tokens == 2:
        assert summary["itl_p50_ms"] == summary["itl_max_ms"]
    assert raw.rstrip().endswith(b"data: [DONE]")
