"""The Embeddings and Messages RPCs through a real gateway's gRPC door to emulated backends,
with a real grpc client: the same parse, routing, fallback, translation and timing as the
HTTP doors."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest

from gateway.app import RunningGateway
from gateway.grpc.client import inference_stub
from gateway.grpc.door_convert import (
    body_to_embeddings_request,
    body_to_messages_request,
    embeddings_request_to_body,
    messages_request_to_body,
)
from gateway.grpc.mount import GRPC_SERVER
from loadtests.emulator.config import FaultConfig
from proto.meridian.v1 import inference_pb2 as pb
from tests.gateway.doors.support import config_with_apis
from tests.gateway.support import MODEL, EmulatorFactory, GatewayFactory
from tests.grpc.grpc_support import MODEL as GRPC_MODEL
from tests.grpc.grpc_support import grpc_rig

GRPC_LISTEN = {"host": "127.0.0.1", "port": 0, "grpc_port": 0}
WEATHER: Any = {
    "name": "get_weather",
    "description": "Weather at a place",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}


async def _grpc_gateway(
    gateway: GatewayFactory, backends: dict[str, tuple[str, list[str] | None]]
) -> RunningGateway:
    return await gateway(config_with_apis(backends, listen=GRPC_LISTEN))


def _target(running: RunningGateway) -> str:
    target: str = running.app[GRPC_SERVER].target
    return target


async def test_embeddings_rpc_is_routed_relayed_and_timed(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    broken = await emulator("b1", faults=FaultConfig(unavailable_rate=1.0))
    good = await emulator("b2")
    chat_only = await emulator("b3")
    running = await _grpc_gateway(
        gateway,
        {"b1": (broken.url, None), "b2": (good.url, None), "b3": (chat_only.url, ["chat"])},
    )
    async with grpc.aio.insecure_channel(_target(running)) as channel:
        stub = inference_stub(channel)
        for _ in range(2):  # round robin starts anywhere: b1 fails over unseen, b3 is no candidate
            request = pb.EmbeddingsRequest(model=MODEL, texts=pb.Texts(texts=["one", "two"]))
            call = stub.Embeddings(request)
            answer = await call
            initial = dict(await call.initial_metadata())
            trailing = dict(await call.trailing_metadata())
            assert "backend=b2" in initial["x-meridian-route"]
            assert [item.index for item in answer.data] == [0, 1]
            assert all(len(item.embedding) == 8 for item in answer.data)
            assert answer.model == MODEL and answer.usage.prompt_tokens > 0
            summary = json.loads(trailing["x-meridian-timing"])
            assert summary["backend"] == "b2"
        single = await stub.Embeddings(pb.EmbeddingsRequest(model=MODEL, text="solo"))
        tokens = pb.EmbeddingsRequest(model=MODEL, token_ids=pb.TokenIds(ids=[1, 2, 3]))
        by_ids = await stub.Embeddings(tokens)
    assert len(single.data) == 1 and len(by_ids.data) == 1
    assert chat_only.stats.requests == 0


async def test_embeddings_rpc_refusals_name_the_field_and_the_request(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    backend = await emulator("b1")
    running = await _grpc_gateway(gateway, {"b1": (backend.url, ["chat"])})
    async with grpc.aio.insecure_channel(_target(running)) as channel:
        stub = inference_stub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as no_input:
            await stub.Embeddings(pb.EmbeddingsRequest(model=MODEL))
        with pytest.raises(grpc.aio.AioRpcError) as not_served:
            call = stub.Embeddings(
                pb.EmbeddingsRequest(model=MODEL, text="x"), metadata=(("x-request-id", "emb-1"),)
            )
            await call
    assert no_input.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "input" in (no_input.value.details() or "")
    assert not_served.value.code() is grpc.StatusCode.NOT_FOUND
    assert ("x-request-id", "emb-1") in tuple(not_served.value.trailing_metadata() or ())
    assert backend.stats.requests == 0


def _events_by_type(events: list[pb.MessagesEvent]) -> list[str]:
    return [e.type for e in events]


@pytest.mark.parametrize("native", [False, True], ids=["translated", "native"])
async def test_messages_rpc_streams_the_messages_events(
    emulator: EmulatorFactory, gateway: GatewayFactory, native: bool
) -> None:
    backend = await emulator("b1")
    apis = ["chat", "messages"] if native else None
    running = await _grpc_gateway(gateway, {"b1": (backend.url, apis)})
    request = pb.MessagesRequest(
        model=MODEL,
        max_tokens=5,
        system_text="be brief",
        messages=[pb.AnthropicMessage(role="user", text="hello")],
    )
    async with grpc.aio.insecure_channel(_target(running)) as channel:
        call = inference_stub(channel).Messages(request)
        events = [event async for event in call]
        initial = dict(await call.initial_metadata())
        trailing = dict(await call.trailing_metadata())
    kinds = _events_by_type(events)
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("content_block_delta") == 5
    text = "".join(e.text for e in events if e.HasField("text"))
    assert text == "".join(
        json.loads(e.json)["delta"]["text"] for e in events if e.type == "content_block_delta"
    )
    start = json.loads(events[0].json)
    assert start["message"]["model"] == MODEL
    final = json.loads(next(e.json for e in events if e.type == "message_delta"))
    assert final["delta"]["stop_reason"] == "max_tokens" and final["usage"]["output_tokens"] == 5
    assert "backend=b1" in initial["x-meridian-route"]
    assert json.loads(trailing["x-meridian-timing"])["backend"] == "b1"
    assert backend.stats.completed == 1


async def test_messages_rpc_translates_tool_use(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    backend = await emulator("b1")
    running = await _grpc_gateway(gateway, {"b1": (backend.url, None)})
    body = {
        "model": MODEL,
        "max_tokens": 6,
        "tools": [WEATHER],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [{"role": "user", "content": [{"type": "text", "text": "weather?"}]}],
    }
    async with grpc.aio.insecure_channel(_target(running)) as channel:
        stub = inference_stub(channel)
        events = [e async for e in stub.Messages(body_to_messages_request(body))]
    blocks = [
        json.loads(e.json)["content_block"] for e in events if e.type == "content_block_start"
    ]
    assert blocks[-1]["type"] == "tool_use" and blocks[-1]["name"] == "get_weather"
    partial = "".join(
        json.loads(e.json)["delta"].get("partial_json", "")
        for e in events
        if e.type == "content_block_delta"
    )
    assert isinstance(json.loads(partial), dict)
    final = json.loads(next(e.json for e in events if e.type == "message_delta"))
    assert final["delta"]["stop_reason"] == "tool_use"


async def test_messages_rpc_failures_are_statuses(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    dying = await emulator("b1", faults=FaultConfig(die_rate=1.0, die_after_tokens=2))
    running = await _grpc_gateway(gateway, {"b1": (dying.url, None)})
    request = pb.MessagesRequest(
        model=MODEL, max_tokens=20, messages=[pb.AnthropicMessage(role="user", text="hi")]
    )
    async with grpc.aio.insecure_channel(_target(running)) as channel:
        stub = inference_stub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as no_max:
            await anext(aiter(stub.Messages(pb.MessagesRequest(model=MODEL))))
        seen: list[pb.MessagesEvent] = []
        with pytest.raises(grpc.aio.AioRpcError) as broke:
            async for event in stub.Messages(request, metadata=(("x-request-id", "msg-1"),)):
                seen.append(event)
    assert no_max.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "max_tokens" in (no_max.value.details() or "")
    assert seen and seen[0].type == "message_start"
    assert "message_stop" not in _events_by_type(seen)
    assert broke.value.code() is not grpc.StatusCode.OK
    assert ("x-request-id", "msg-1") in tuple(broke.value.trailing_metadata() or ())


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "input": "one"},
        {"model": "m", "input": ["a", "b"], "dimensions": 4, "user": "u"},
        {"model": "m", "input": [1, 2, 3], "truncate_prompt_tokens": 2},
    ],
)
def test_embeddings_bodies_round_trip(body: dict[str, Any]) -> None:
    converted = embeddings_request_to_body(body_to_embeddings_request(body, tenant="t"))
    assert converted.body == {**body, "encoding_format": "float"} and converted.tenant == "t"


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]},
        {
            "model": "m",
            "max_tokens": 9,
            "system": [{"type": "text", "text": "sys"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "w", "input": {}}],
                },
            ],
            "temperature": 0.5,
            "top_p": 0.9,
            "top_k": 5,
            "stop_sequences": ["END"],
            "tools": [WEATHER],
            "tool_choice": {"type": "auto"},
            "metadata": {"user_id": "x"},
            "thinking": {"type": "disabled"},
        },
    ],
)
def test_messages_bodies_round_trip(body: dict[str, Any]) -> None:
    converted = messages_request_to_body(body_to_messages_request(body))
    assert converted.body == {**body, "stream": True} and converted.tenant is None


async def test_the_direct_backend_serves_both_rpcs_too() -> None:
    async with grpc_rig() as rig:  # the servicer over one engine, no gateway: the baseline
        answer = await rig.stub.Embeddings(pb.EmbeddingsRequest(model=GRPC_MODEL, text="hi"))
        request = pb.MessagesRequest(
            model=GRPC_MODEL, max_tokens=3, messages=[pb.AnthropicMessage(role="user", text="hi")]
        )
        events = [e async for e in rig.stub.Messages(request)]
    assert len(answer.data) == 1 and len(answer.data[0].embedding) == 8
    kinds = _events_by_type(events)
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("content_block_delta") == 3
