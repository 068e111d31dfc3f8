"""``/v1/embeddings`` and ``/v1/responses`` through the gateway to emulated backends, with the
official openai SDK."""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import pytest

from loadtests.emulator.config import FaultConfig
from tests.gateway.doors.support import config_with_apis
from tests.gateway.support import MODEL, EmulatorFactory, GatewayFactory


async def test_embeddings_are_routed_and_relayed(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    backend = await emulator("b1")
    config = config_with_apis({"b1": (backend.url, None)}, routing={})  # the default policy
    running = await gateway(config)
    client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="unused")
    raw = await client.embeddings.with_raw_response.create(model=MODEL, input=["one", "two"])
    result = raw.parse()
    await client.close()
    assert [item.index for item in result.data] == [0, 1]
    assert all(len(item.embedding) == 8 for item in result.data)
    assert result.usage.prompt_tokens > 0
    assert "backend=b1" in raw.headers["x-meridian-route"]
    names = [item.split(";")[0].strip() for item in raw.headers["server-timing"].split(",")]
    assert "predicted_ttft" in names and "upstream_ttfb" in names


async def test_embeddings_retry_before_the_answer(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    broken = await emulator("b1", faults=FaultConfig(unavailable_rate=1.0))
    good = await emulator("b2")
    running = await gateway(config_with_apis({"b1": (broken.url, None), "b2": (good.url, None)}))
    client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0)
    for _ in range(2):  # round robin starts on either: b1 fails over to b2 unseen
        raw = await client.embeddings.with_raw_response.create(model=MODEL, input="x")
        assert "backend=b2" in raw.headers["x-meridian-route"]
    await client.close()


async def test_responses_only_reach_backends_that_declare_them(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    plain = await emulator("plain")
    able = await emulator("able")
    running = await gateway(
        config_with_apis({"plain": (plain.url, None), "able": (able.url, ["chat", "responses"])})
    )
    client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0)
    for _ in range(2):
        raw = await client.responses.with_raw_response.create(
            model=MODEL, input="hello", instructions="be brief", max_output_tokens=4
        )
        assert "backend=able" in raw.headers["x-meridian-route"]
        response = raw.parse()
        assert response.output_text and response.usage is not None
        assert response.usage.output_tokens == 4
    stream = await client.responses.create(
        model=MODEL, input=[{"role": "user", "content": "hi"}], max_output_tokens=5, stream=True
    )
    kinds: list[str] = []
    text = ""
    async for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
    await client.close()
    assert kinds[0] == "response.created" and kinds[-1] in (
        "response.completed",
        "response.incomplete",
    )
    assert kinds.count("response.output_text.delta") == 5 and text
    assert plain.stats.requests == 0


async def test_responses_stream_carries_timing_before_its_last_event(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    able = await emulator("able")
    running = await gateway(config_with_apis({"able": (able.url, ["responses"])}))
    body = {"model": MODEL, "input": "hi", "max_output_tokens": 3, "stream": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + "/v1/responses", json=body) as response:
            assert response.status == 200
            assert "backend=able" in response.headers["X-Meridian-Route"]
            raw = await response.read()
    events = [e for e in raw.split(b"\n\n") if e]
    assert events[-2].startswith(b": meridian-timing ")
    assert b'"output_tokens":3' in events[-2]
    assert events[-1].startswith(b"event: response.")


async def test_no_backend_with_the_api_is_a_clear_error(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    plain = await emulator("plain")
    running = await gateway(config_with_apis({"plain": (plain.url, None)}))
    client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0)
    try:
        await client.responses.create(model=MODEL, input="hello")
        raise AssertionError("expected an error")
    except openai.APIStatusError as error:
        assert error.status_code == 404
        assert isinstance(error.body, dict) and error.body.get("code") == "endpoint_not_served"
    await client.close()
    assert plain.stats.requests == 0


async def test_responses_retry_before_the_first_event(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    broken = await emulator("b1", faults=FaultConfig(unavailable_rate=1.0))
    good = await emulator("b2")
    running = await gateway(
        config_with_apis({"b1": (broken.url, ["responses"]), "b2": (good.url, ["responses"])})
    )
    client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0)
    for _ in range(2):  # round robin starts on either: b1's 503 fails over to b2 unseen
        stream = await client.responses.with_raw_response.create(
            model=MODEL, input="hi", max_output_tokens=3, stream=True
        )
        assert "backend=b2" in stream.headers["x-meridian-route"]
        kinds = [event.type async for event in stream.parse()]
        assert kinds[-1] in ("response.completed", "response.incomplete")
    await client.close()
    assert broken.stats.requests >= 1


async def test_a_responses_stream_that_breaks_ends_with_an_error_event(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    backend = await emulator("b1", faults=FaultConfig(die_rate=1.0, die_after_tokens=2))
    running = await gateway(config_with_apis({"b1": (backend.url, ["responses"])}))
    body = {"model": MODEL, "input": "hi", "max_output_tokens": 20, "stream": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + "/v1/responses", json=body) as response:
            assert response.status == 200
            raw = await response.read()
    events = [e for e in raw.split(b"\n\n") if e]
    assert events[0].startswith(b"event: response.created")
    error = next(e for e in events if e.startswith(b"event: error"))
    assert b'"type":"error"' in error
    assert not any(b"response.completed" in e for e in events)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/embeddings", {"input": ""}, "input"),
        ("/v1/responses", {"input": []}, "input"),
        ("/v1/responses", {"input": ["not an object"]}, "input[0]"),
    ],
)
async def test_bodies_the_api_refuses_are_400s(
    emulator: EmulatorFactory, gateway: GatewayFactory, path: str, body: dict[str, Any], param: str
) -> None:
    backend = await emulator("b1")
    running = await gateway(config_with_apis({"b1": (backend.url, ["embeddings", "responses"])}))
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + path, json={"model": MODEL, **body}) as response:
            assert response.status == 400
            error = (await response.json())["error"]
    assert error["param"] == param
    assert backend.stats.requests == 0


async def test_embeddings_of_token_arrays(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    backend = await emulator("b1")
    running = await gateway(config_with_apis({"b1": (backend.url, None)}))
    client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="unused")
    result = await client.embeddings.create(model=MODEL, input=[[1, 2, 3], [4, 5]])
    await client.close()
    assert len(result.data) == 2
