"""The gRPC door over real sockets: client → grpc.aio server → emulated backend over HTTP."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gateway.grpc.client import inference_stub
from gateway.grpc.convert import decode_status_details, retry_delay_s
from gateway.grpc.server import GrpcEngine, GrpcServerConfig, serving_grpc
from gateway.grpc.servicer import ServicerLimits, peer_address
from gateway.lifecycle.seam import BackendEvent, BackendRequest, ModelEntry
from loadtests.emulator.config import FaultConfig
from proto.meridian.v1 import inference_pb2 as pb
from tests.grpc.grpc_support import MODEL, chat, grpc_rig, wait_until


async def test_chat_streams_chunks_with_metadata_and_usage(grpc_engine: GrpcEngine) -> None:
    async with grpc_rig(engine=grpc_engine) as rig:
        call = rig.stub.ChatCompletion(
            chat(max_tokens=5, stream_options=pb.StreamOptions(include_usage=True))
        )
        chunks = [chunk async for chunk in call]
        initial = dict(await call.initial_metadata())
        trailing = dict(await call.trailing_metadata())
        assert await call.code() is grpc.StatusCode.OK
    text_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(text_chunks) == 5
    assert chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + 5
    assert any(c.choices and c.choices[0].finish_reason == "length" for c in chunks)
    assert initial["x-meridian-route"] == "backend=b1"
    assert initial["server-timing"].startswith("upstream_ttfb;dur=")
    assert trailing["server-timing"].startswith("total;dur=")


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
async def test_compressed_requests_are_accepted(
    grpc_engine: GrpcEngine, compression: grpc.Compression
) -> None:
    async with grpc_rig(engine=grpc_engine) as rig:
        call = rig.stub.ChatCompletion(chat(max_tokens=3), compression=compression, timeout=30)
        chunks = [chunk async for chunk in call]
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 3


async def test_completion_and_list_models(grpc_engine: GrpcEngine) -> None:
    async with grpc_rig(engine=grpc_engine) as rig:
        request = pb.CompletionRequest(model=MODEL, prompt_text="once upon", max_tokens=3)
        chunks = [chunk async for chunk in rig.stub.Completion(request)]
        models = await rig.stub.ListModels(pb.ListModelsRequest())
    assert sum(1 for c in chunks if c.choices and c.choices[0].text) == 3
    assert [m.id for m in models.models] == [MODEL]


async def _status_of(call: grpc.aio.UnaryStreamCall) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    return caught.value


async def test_invalid_request_and_unknown_model(grpc_engine: GrpcEngine) -> None:
    async with grpc_rig(engine=grpc_engine) as rig:
        invalid = await _status_of(rig.stub.ChatCompletion(pb.ChatCompletionRequest(model=MODEL)))
        unknown = await _status_of(rig.stub.ChatCompletion(chat(model="no-such-model")))
    assert invalid.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "messages" in (invalid.details() or "")
    assert unknown.code() is grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("faults", "expected"),
    [
        (FaultConfig(rate_limit_rate=1.0, retry_after_s=2.5), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (FaultConfig(unavailable_rate=1.0, retry_after_s=1.0), grpc.StatusCode.UNAVAILABLE),
        (FaultConfig(error_rate=1.0), grpc.StatusCode.INTERNAL),
    ],
)
async def test_backend_refusals_map_to_status(
    faults: FaultConfig, expected: grpc.StatusCode, grpc_engine: GrpcEngine
) -> None:
    async with grpc_rig(faults, engine=grpc_engine) as rig:
        error = await _status_of(rig.stub.ChatCompletion(chat()))
    assert error.code() is expected
    trailing = error.trailing_metadata() or ()
    if expected is grpc.StatusCode.RESOURCE_EXHAUSTED:
        assert dict(trailing)["retry-after"] == "3"
        assert retry_delay_s(decode_status_details(tuple(trailing))) == pytest.approx(2.5)


async def test_mid_stream_failure_ends_with_non_ok_status(grpc_engine: GrpcEngine) -> None:
    async with grpc_rig(FaultConfig(die_rate=1.0, die_after_tokens=3), engine=grpc_engine) as rig:
        call = rig.stub.ChatCompletion(chat(max_tokens=50))
        received: list[pb.ChatCompletionChunk] = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for chunk in call:
                received.append(chunk)
    assert caught.value.code() is grpc.StatusCode.INTERNAL
    assert "backend" in (caught.value.details() or "")  # the upstream broke: not a refusal
    # The engine dies after 3 tokens. How many reach the client is not fixed: this rig's backend
    # (DirectHttpBackend) reads through aiohttp, whose StreamReader raises the reset before the
    # bytes it had buffered, so a busy loop that had not read them yet loses them (0-3 seen).
    # What must hold is that the call never ends OK and never carries more than was generated.
    # The gateway's own relay relays each read as it comes, so through it the tokens do arrive
    # (test_grpc_gateway.py::test_mid_stream_failure_is_a_non_ok_status_with_timings).
    assert len(received) <= 4


async def test_client_cancel_cancels_upstream(grpc_engine: GrpcEngine) -> None:
    async with grpc_rig(engine=grpc_engine) as rig:
        call = rig.stub.ChatCompletion(chat(max_tokens=2000))
        async for _ in call:
            break  # one chunk in: the backend is decoding
        assert rig.emulator.stats.completed == 0
        call.cancel()
        assert await wait_until(lambda: rig.emulator.stats.cancelled == 1, 10.0)
        assert rig.emulator.stats.completed == 0


async def test_client_deadline_bounds_the_request_and_cancels_upstream(
    grpc_engine: GrpcEngine,
) -> None:
    async with grpc_rig(FaultConfig(stall_rate=1.0, stall_ms=5_000), engine=grpc_engine) as rig:
        error = await _status_of(rig.stub.ChatCompletion(chat(), timeout=0.3))
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        # Within the 5 s stall: a request left running would reach its first token after it.
        assert await wait_until(lambda: rig.emulator.stats.cancelled == 1, 4.0)


async def test_message_size_limits(grpc_engine: GrpcEngine) -> None:
    config = GrpcServerConfig(
        max_receive_message_bytes=64 * 1024, limits=ServicerLimits(max_body_bytes=8 * 1024)
    )
    async with grpc_rig(config=config, engine=grpc_engine) as rig:
        too_big = await _status_of(rig.stub.ChatCompletion(chat("x" * 100_000)))
        body_too_big = await _status_of(rig.stub.ChatCompletion(chat("x" * 10_000)))
    assert too_big.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in (too_big.details() or "")
    assert body_too_big.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "limit" in (body_too_big.details() or "")


async def test_health_reports_serving_then_not_serving_while_draining(
    grpc_engine: GrpcEngine,
) -> None:
    async with grpc_rig(engine=grpc_engine) as rig:
        health = health_pb2_grpc.HealthStub(rig.channel)
        for service in ("", "meridian.v1.Inference"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        await rig.server.drain()
        for service in ("", "meridian.v1.Inference"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_reflection_lists_and_describes_the_service(grpc_engine: GrpcEngine) -> None:
    async with grpc_rig(engine=grpc_engine) as rig:
        reflection = reflection_pb2_grpc.ServerReflectionStub(rig.channel)
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="meridian.v1.Inference"),
        ]
        replies = [reply async for reply in reflection.ServerReflectionInfo(iter(requests))]
    services = {s.name for s in replies[0].list_services_response.service}
    assert {"meridian.v1.Inference", "grpc.health.v1.Health"} <= services
    files = replies[1].file_descriptor_response.file_descriptor_proto
    assert files, "reflection returned no descriptor for meridian.v1.Inference"


class _FailingBackend:
    """A backend with a bug: the servicer must answer INTERNAL without leaking the error text."""

    async def stream(self, request: BackendRequest) -> AsyncGenerator[BackendEvent, None]:
        raise RuntimeError("secret internal detail")
        yield  # pragma: no cover - makes this an async generator

    async def list_models(self) -> Sequence[ModelEntry]:
        return []


async def test_backend_bug_is_internal_without_details(grpc_engine: GrpcEngine) -> None:
    async with (
        serving_grpc(_FailingBackend(), GrpcServerConfig(engine=grpc_engine)) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        error = await _status_of(inference_stub(channel).ChatCompletion(chat()))
    assert error.code() is grpc.StatusCode.INTERNAL
    assert "secret" not in (error.details() or "")


@pytest.mark.parametrize(
    ("peer", "address"),
    [
        ("ipv4:127.0.0.1:50123", "127.0.0.1"),
        ("ipv6:[::1]:50123", "::1"),
        ("unix:/tmp/socket", None),
        ("", None),
    ],
)
def test_peer_address(peer: str, address: str | None) -> None:
    assert peer_address(peer) == address
