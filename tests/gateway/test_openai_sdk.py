"""The official openai SDK, sync and async, streaming and not, chat and completions."""

from __future__ import annotations

import asyncio

import openai

from tests.gateway.support import MODEL, EmulatorFactory, GatewayFactory, config_for


async def _gateway_url(emulator: EmulatorFactory, gateway: GatewayFactory) -> str:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    return running.url + "/v1"


async def test_async_chat_streaming_with_usage(emulator, gateway) -> None:
    client = openai.AsyncOpenAI(base_url=await _gateway_url(emulator, gateway), api_key="unused")
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello there"}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    content = ""
    usage = None
    async for chunk in stream:
        if chunk.choices:
            content += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    assert content
    assert usage is not None and usage.completion_tokens == 5
    await client.close()


async def test_async_chat_and_completions_non_streaming(emulator, gateway) -> None:
    client = openai.AsyncOpenAI(base_url=await _gateway_url(emulator, gateway), api_key="unused")
    chat = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert chat.choices[0].message.content
    assert chat.usage is not None and chat.usage.completion_tokens == 3
    completion = await client.completions.create(model=MODEL, prompt="Once upon", max_tokens=4)
    assert completion.choices[0].text
    assert completion.usage is not None and completion.usage.completion_tokens == 4
    models = await client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    await client.close()


async def test_sync_sdk_streaming_completions_and_chat(emulator, gateway) -> None:
    base_url = await _gateway_url(emulator, gateway)

    def run_sync() -> tuple[str, str, int]:
        client = openai.OpenAI(base_url=base_url, api_key="unused")
        text = "".join(
            chunk.choices[0].text
            for chunk in client.completions.create(
                model=MODEL, prompt="abc", max_tokens=6, stream=True
            )
            if chunk.choices
        )
        chat = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True
            )
            if chunk.choices
        )
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
        route = raw.headers.get("x-meridian-route", "")
        client.close()
        return text, chat, len(route)

    text, chat, route_len = await asyncio.to_thread(run_sync)
    assert text and chat and route_len > 0
