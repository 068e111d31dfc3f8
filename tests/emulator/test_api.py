"""The emulator speaks vLLM's OpenAI dialect: checked with the openai SDK and raw HTTP."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import pytest

from tests.emulator.helpers import chat


async def test_streaming_chat_with_usage(start) -> None:
    emulator = await start()
    client = openai.AsyncOpenAI(base_url=emulator.url + "/v1", api_key="unused")
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x" * 400}], max_tokens=7,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = [chunk async for chunk in stream]
    await client.close()
    assert chunks[0].choices[0].delta.role == "assistant"
    contents = [c.choices[0].delta.content for c in chunks[1:] if c.choices]
    assert len(contents) == 7 and all(contents)
    assert chunks[-2].choices[0].finish_reason == "length"
    usage = chunks[-1].usage
    assert usage is not None
    assert chunks[-1].choices == []
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (102, 7, 109)


def _cached(completion: openai.types.Completion) -> int:
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    return completion.usage.prompt_tokens_details.cached_tokens or 0


async def test_non_streaming_completion_and_prefix_cache(start) -> None:
    emulator = await start()
    client = openai.AsyncOpenAI(base_url=emulator.url + "/v1", api_key="unused")
    prompt = "shared system prompt " * 40  # 840 bytes = 210 tokens = 13 full blocks
    first = await client.completions.create(model="m", prompt=prompt, max_tokens=3)
    second = await client.completions.create(model="m", prompt=prompt + "more", max_tokens=3)
    await client.close()
    assert first.object == "text_completion" and first.choices[0].text == " the quick brown"
    assert _cached(first) == 0
    assert _cached(second) == 13 * 16
    assert emulator.stats.completed == 2


async def test_default_output_length_and_stop(start) -> None:
    emulator = await start(engine={"default_output_tokens": 4})
    async with aiohttp.ClientSession() as session:
        async with session.post(emulator.url + "/v1/chat/completions", json=chat()) as resp:
            body = await resp.json()
    assert body["usage"]["completion_tokens"] == 4
    assert body["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        ({"model": "other", "messages": [{"role": "user", "content": "x"}]}, 404),
        ({"model": "m", "messages": []}, 400),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400),
        ({"model": "m", "prompt": "x", "stream_options": {"include_usage": True}}, 400),
    ],
)
async def test_bad_requests_get_openai_errors(start, payload, status) -> None:
    emulator = await start()
    path = "/v1/completions" if "prompt" in payload else "/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        async with session.post(emulator.url + path, json=payload) as resp:
            body = await resp.json()
    assert resp.status == status
    assert body["error"]["code"] == status and body["error"]["message"]


async def test_models_health_metrics_admin(start) -> None:
    emulator = await start(models=["m", "m2"])
    async with aiohttp.ClientSession() as session:
        async with session.get(emulator.url + "/v1/models") as resp:
            assert [m["id"] for m in (await resp.json())["data"]] == ["m", "m2"]
        async with session.get(emulator.url + "/health") as resp:
            assert resp.status == 200
        async with session.post(emulator.url + "/v1/chat/completions", json=chat(max_tokens=3)):
            pass
        async with session.get(emulator.url + "/metrics") as resp:
            text = await resp.text()
        async with session.get(emulator.url + "/admin/stats") as resp:
            stats = await resp.json()
    for name in (
        'vllm:num_requests_running{model_name="m"}',
        'vllm:num_requests_waiting{model_name="m"}',
        'vllm:kv_cache_usage_perc{model_name="m"}',
        'vllm:prefix_cache_queries_total{model_name="m"}',
        'vllm:prefix_cache_hits_total{model_name="m"}',
        'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"}',
        'vllm:inter_token_latency_seconds_count{model_name="m"} 2.0',
    ):
        assert name in text
    assert stats["requests"] == 1 and stats["completed"] == 1
    # its steps end on the loop's clock: the latest is past by the time the answer is done
    assert stats["last_step_end_s"] <= asyncio.get_running_loop().time()
