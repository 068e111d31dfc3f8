"""Model aliases through the gRPC door: the backend gets its own id, ListModels the public
names."""

from __future__ import annotations

import grpc

from gateway.app import start_gateway
from gateway.config import parse_config
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from gateway.grpc.server import GrpcEngine
from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.server import start_emulated_backend
from proto.meridian.v1 import inference_pb2 as pb
from tests.grpc.grpc_support import FAST_ENGINE, chat

BACKEND_ID = "/models/grpc-model.gguf"


async def test_alias_reaches_the_backend_by_its_own_id(grpc_engine: GrpcEngine) -> None:
    emulator = await start_emulated_backend(
        EmulatedBackendConfig(name="b1", models=(BACKEND_ID,), engine=FAST_ENGINE)
    )
    data = {
        "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": 0, "grpc_engine": grpc_engine},
        "backends": [
            {
                "name": "b1",
                "region": "local",
                "url": emulator.url + "/v1",
                "models": ["public-model"],
                "model_ids": {"public-model": BACKEND_ID},
            }
        ],
        "model_aliases": {"nickname": "public-model"},
        "timeouts": {"first_token_s": 5.0},
    }
    gateway = await start_gateway(parse_config(data, "<grpc-alias>"))
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
