"""Model aliases through the gRPC door: the backend gets its own id, ListModels the public
names."""

from __future__ import annotations

from typing import Any

import aiohttp
import grpc
import orjson
import pytest

from gateway.app import start_gateway
from gateway.config import parse_config
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from gateway.grpc.server import GrpcEngine
from gateway.sse import SseSplitter
from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.server import start_emulated_backend
from proto.meridian.v1 import inference_pb2 as pb
from tests.grpc.grpc_support import FAST_ENGINE, chat

BACKEND_ID = "/models/grpc-model.gguf"


def _config(emulator_url: str, grpc_engine: GrpcEngine) -> dict[str, Any]:
    return {
        "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": 0, "grpc_engine": grpc_engine},
        "backends": [
            {
                "name": "b1",
                "region": "local",
                "url": emulator_url + "/v1",
                "models": ["public-model"],
                "model_ids": {"public-model": BACKEND_ID},
            }
        ],
        "model_aliases": {"nickname": "public-model"},
        "timeouts": {"first_token_s": 5.0},
    }


async def test_alias_reaches_the_backend_by_its_own_id(grpc_engine: GrpcEngine) -> None:
    emulator = await start_emulated_backend(
        EmulatedBackendConfig(name="b1", models=(BACKEND_ID,), engine=FAST_ENGINE)
    )
    gateway = await start_gateway(parse_config(_config(emulator.url, grpc_engine), "<alias>"))
    try:
        async with grpc.aio.insecure_channel(gateway.app[GRPC_SERVER].target) as channel:
            stub = inference_stub(channel)
            models = await stub.ListModels(pb.ListModelsRequest())
            for name in ("public-model", "nickname"):
                chunks = [c async for c in stub.ChatCompletion(chat(model=name, max_tokens=3))]
                assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 3
                assert {c.model for c in chunks} == {name}  # never the backend's own id
    finally:
        await gateway.close()
        await emulator.close()
    assert [m.id for m in models.models] == ["nickname", "public-model"]
    assert emulator.stats.completed == 2


def _chunk_events(body: bytes) -> list[bytes]:
    """The data of each ``chat.completion.chunk`` event of an SSE body."""
    events = SseSplitter().feed(body)
    return [e.data for e in events if e.data is not None and b"chat.completion.chunk" in e.data]


async def test_each_upstream_chunk_is_parsed_once_and_named_as_the_client_named_it(
    grpc_engine: GrpcEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The core parses each event to check it; the gRPC door builds its message from that
    object (SseEvent.parsed) and renames the model in it: no second parse of the bytes."""
    emulator = await start_emulated_backend(
        EmulatedBackendConfig(name="b1", models=(BACKEND_ID,), engine=FAST_ENGINE)
    )
    gateway = await start_gateway(parse_config(_config(emulator.url, grpc_engine), "<alias>"))
    parsed: list[bytes] = []
    loads = orjson.loads

    def counting_loads(data: bytes | str) -> Any:
        if isinstance(data, bytes) and b"chat.completion.chunk" in data:
            parsed.append(data)
        return loads(data)

    try:
        async with aiohttp.ClientSession() as session:  # what the backend sends for it
            messages = [{"role": "user", "content": "hi"}]
            body = {"model": BACKEND_ID, "messages": messages, "max_tokens": 3, "stream": True}
            async with session.post(emulator.url + "/v1/chat/completions", json=body) as answer:
                sent = _chunk_events(await answer.read())
        async with grpc.aio.insecure_channel(gateway.app[GRPC_SERVER].target) as channel:
            monkeypatch.setattr(orjson, "loads", counting_loads)
            stream = inference_stub(channel).ChatCompletion(chat(model="nickname", max_tokens=3))
            chunks = [chunk async for chunk in stream]
            monkeypatch.undo()
    finally:
        await gateway.close()
        await emulator.close()
    assert len(sent) >= 4  # a role opener and three tokens at least
    assert len(parsed) == len(sent)  # one parse each (two before: the check's and the door's)
    assert all(BACKEND_ID.encode() in data for data in parsed)  # the backend's own bytes
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 3
    assert {c.model for c in chunks} == {"nickname"}
