"""Anthropic Messages through the gateway with the official anthropic SDK: translated to chat
completions for an emulated backend that only speaks OpenAI (text, system prompt, tools, stop
reasons, usage), and passed through to one that declares ``messages``."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import anthropic
import pytest

from loadtests.emulator.config import FaultConfig
from tests.gateway.doors.support import config_with_apis
from tests.gateway.support import MODEL, EmulatorFactory, GatewayFactory

WEATHER: Any = {
    "name": "get_weather",
    "description": "Weather at a place",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}


async def _client(
    emulator: EmulatorFactory, gateway: GatewayFactory, native: bool
) -> tuple[anthropic.AsyncAnthropic, str]:
    backend = await emulator("b1")
    apis = ["chat", "messages"] if native else None
    running = await gateway(config_with_apis({"b1": (backend.url, apis)}))
    return anthropic.AsyncAnthropic(base_url=running.url, api_key="unused", max_retries=0), "b1"


@pytest.mark.parametrize("native", [False, True], ids=["translated", "native"])
async def test_messages_not_streaming(
    emulator: EmulatorFactory, gateway: GatewayFactory, native: bool
) -> None:
    client, _ = await _client(emulator, gateway, native)
    message = await client.messages.create(
        model=MODEL,
        max_tokens=4,
        system="You are terse.",
        messages=[{"role": "user", "content": "Where does the time go?"}],
    )
    await client.close()
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 4 and message.usage.input_tokens > 0
    # the emulator's chat ids are chatcmpl-...: this shows which API of the backend answered
    assert message.id.startswith("msg_b1-" if native else "msg_chatcmpl-b1-")


@pytest.mark.parametrize("native", [False, True], ids=["translated", "native"])
async def test_messages_streaming(
    emulator: EmulatorFactory, gateway: GatewayFactory, native: bool
) -> None:
    client, _ = await _client(emulator, gateway, native)
    async with client.messages.stream(
        model=MODEL,
        max_tokens=5,
        system=[{"type": "text", "text": "You are terse."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    ) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    await client.close()
    assert text and final.content[0].type == "text" and final.content[0].text == text
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 5
    assert final.id.startswith("msg_b1-" if native else "msg_chatcmpl-b1-")


async def test_tools_round_trip_through_translation(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    client, _ = await _client(emulator, gateway, native=False)
    question: Any = {"role": "user", "content": "Weather in Paris?"}
    first = await client.messages.create(
        model=MODEL, max_tokens=6, tools=[WEATHER], messages=[question]
    )
    call = first.content[-1]
    assert first.stop_reason == "tool_use"
    assert call.type == "tool_use" and call.name == "get_weather"
    assert isinstance(call.input, dict) and "q" in call.input
    # the tool's result goes back as a tool_result block; streamed this time
    follow_up: Any = [
        question,
        {"role": "assistant", "content": [c.model_dump() for c in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
    ]
    async with client.messages.stream(
        model=MODEL,
        max_tokens=4,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=follow_up,
    ) as stream:
        final = await stream.get_final_message()
    await client.close()
    block = final.content[-1]
    assert final.stop_reason == "tool_use"
    assert block.type == "tool_use" and json.dumps(block.input).startswith("{")


async def test_errors_come_in_anthropic_shape(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    client, _ = await _client(emulator, gateway, native=False)
    with pytest.raises(anthropic.NotFoundError) as missing:
        await client.messages.create(
            model="nope", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(anthropic.BadRequestError) as bad:
        await client.messages.create(model=MODEL, max_tokens=4, messages=[])
    await client.close()
    body: Any = missing.value.body
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"} and body["error"]["type"] == "not_found_error"
    assert (
        isinstance(bad.value.body, dict)
        and bad.value.body["error"]["type"] == "invalid_request_error"
    )


async def test_a_failure_mid_stream_is_a_messages_error_event(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    backend = await emulator("b1", faults=FaultConfig(die_rate=1.0, die_after_tokens=2))
    running = await gateway(config_with_apis({"b1": (backend.url, None)}))
    body = {
        "model": MODEL,
        "max_tokens": 20,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + "/v1/messages", json=body) as response:
            assert response.status == 200
            raw = await response.read()
    events = [e for e in raw.split(b"\n\n") if e]
    assert events[0].startswith(b"event: message_start")
    error = next(e for e in events if e.startswith(b"event: error"))
    payload = json.loads(error.split(b"data: ", 1)[1])
    assert payload["type"] == "error" and payload["error"]["type"] == "api_error"
    assert not any(e.startswith(b"event: message_stop") for e in events)
