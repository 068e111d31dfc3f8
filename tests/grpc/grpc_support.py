"""Real parts for the gRPC tests: an emulated backend, the gRPC server in front of it, a client."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc

from gateway.grpc.client import inference_stub
from gateway.grpc.direct_backend import DirectHttpBackend
from gateway.grpc.server import GrpcEngine, GrpcServerConfig, RunningGrpcServer, serving_grpc
from loadtests.emulator.config import EmulatedBackendConfig, EngineParams, FaultConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend
from proto.meridian.v1 import inference_pb2 as pb
from tests.servers import hang_bound

MODEL = "grpc-test-model"
FAST_ENGINE = EngineParams(
    decode_base_ms=2.0,
    decode_per_seq_ms=0.0,
    first_token_overhead_ms=1.0,
    prefill_tokens_per_s=1_000_000.0,
    default_output_tokens=8,
)


@dataclass
class GrpcRig:
    emulator: RunningEmulator
    server: RunningGrpcServer
    channel: grpc.aio.Channel
    stub: Any  # generated InferenceStub (untyped)


# Channel options for a TCP connection of the channel's own: grpc otherwise shares one
# connection among a process's channels to the same target.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


@asynccontextmanager
async def grpc_rig(
    faults: FaultConfig | None = None,
    config: GrpcServerConfig | None = None,
    engine: GrpcEngine = "grpcio",
) -> AsyncIterator[GrpcRig]:
    config = dataclasses.replace(config or GrpcServerConfig(), engine=engine)
    emulator = await start_emulated_backend(
        EmulatedBackendConfig(
            name="b1", models=(MODEL,), engine=FAST_ENGINE, faults=faults or FaultConfig()
        )
    )
    backend = DirectHttpBackend(emulator.url, name="b1")
    try:
        async with (
            serving_grpc(backend, config) as server,
            grpc.aio.insecure_channel(server.target) as channel,
        ):
            yield GrpcRig(emulator, server, channel, inference_stub(channel))
    finally:
        await backend.close()
        await emulator.close()


def chat(content: str = "hello", max_tokens: int = 5, **fields: object) -> pb.ChatCompletionRequest:
    return pb.ChatCompletionRequest(
        model=fields.pop("model", MODEL),  # type: ignore[arg-type]
        messages=[pb.ChatMessage(role="user", text=content)],
        max_tokens=max_tokens,
        **fields,  # type: ignore[arg-type]
    )


async def wait_until(predicate: object, timeout_s: float = 2.0) -> bool:
    """Poll until ``predicate()``; False after ``timeout_s`` (never before HANG_BOUND_S)."""
    deadline = time.monotonic() + hang_bound(timeout_s)
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.01)
    return False
