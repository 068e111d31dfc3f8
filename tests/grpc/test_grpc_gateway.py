"""The gRPC door of a real gateway (same process, loop and Relay as HTTP) over emulated backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.app import RunningGateway, start_gateway
from gateway.config import parse_config
from gateway.grpc.client import inference_stub
from gateway.grpc.convert import decode_status_details, retry_delay_s
from gateway.grpc.mount import GRPC_SERVER
from gateway.grpc.server import GrpcEngine
from gateway.grpc_h2.limits import CLOSE_REASONS
from gateway.state_keys import METRICS
from loadtests.emulator.config import EmulatedBackendConfig, FaultConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend
from proto.meridian.v1 import inference_pb2 as pb
from tests.grpc.grpc_support import FAST_ENGINE, MODEL, OWN_CONNECTION, chat, wait_until
from tests.grpc.h2_client import RawClient


@dataclass
class Door:
    gateway: RunningGateway
    emulators: list[RunningEmulator]
    channel: grpc.aio.Channel
    stub: Any


@asynccontextmanager
async def grpc_gateway(
    *faults: FaultConfig, engine: GrpcEngine = "grpcio", **overrides: Any
) -> AsyncIterator[Door]:
    async with AsyncExitStack() as stack:
        emulators = []
        for index, fault in enumerate(faults or (FaultConfig(),)):
            config = EmulatedBackendConfig(
                name=f"b{index + 1}", models=(MODEL,), engine=FAST_ENGINE, faults=fault
            )
            emulator = await start_emulated_backend(config)
            stack.push_async_callback(emulator.close)
            emulators.append(emulator)
        data: dict[str, Any] = {
            "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": 0, "grpc_engine": engine},
            "backends": [
                {"name": e.name, "region": "local", "url": e.url + "/v1", "models": [MODEL]}
                for e in emulators
            ],
            "timeouts": {"first_token_s": 5.0},
            **overrides,
        }
        gateway = await start_gateway(parse_config(data, "<grpc-test>"))
        stack.push_async_callback(gateway.close)
        target = gateway.app[GRPC_SERVER].target
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(target))
        yield Door(gateway, emulators, channel, inference_stub(channel))


async def _error_of(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    return caught.value


def _timing_names(header: str) -> list[str]:
    return [item.split(";")[0].strip() for item in header.split(",")]


async def test_chat_through_the_gateway_carries_route_and_timing(grpc_engine: GrpcEngine) -> None:
    async with grpc_gateway(engine=grpc_engine) as door:
        call = door.stub.ChatCompletion(
            chat(max_tokens=4, stream_options=pb.StreamOptions(include_usage=True)),
            metadata=(("x-request-id", "grpc-req-1"),),
        )
        chunks = [chunk async for chunk in call]
        initial = dict(await call.initial_metadata())
        trailing = dict(await call.trailing_metadata())
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 4
    # The engine's role-only opener came with the first token: one message, not two
    # (gateway/grpc/opener.py); 4 tokens and the usage chunk.
    assert len(chunks) == 5
    first = chunks[0].choices[0].delta
    assert first.role == "assistant" and first.content
    assert chunks[-1].usage.completion_tokens == 4
    assert "backend=b1" in initial["x-meridian-route"]
    assert initial["x-request-id"] == "grpc-req-1"
    names = _timing_names(initial["server-timing"])
    assert names[:2] == ["gw", "route"] and "ttft" in names and "upstream_ttfb" in names
    summary = orjson.loads(trailing["x-meridian-timing"])
    assert summary["backend"] == "b1" and summary["output_tokens"] == 4
    assert summary["ttft_ms"] > 0 and summary["e2e_ms"] >= summary["ttft_ms"]
    assert "e2e" in _timing_names(trailing["server-timing"])


async def test_n_choices_each_get_their_role_and_tokens(grpc_engine: GrpcEngine) -> None:
    """``n: 3``: the engine opens each choice with a role chunk; every choice's role and
    tokens reach the client under its own index, whatever the openers were folded into."""
    async with grpc_gateway(engine=grpc_engine) as door:
        call = door.stub.ChatCompletion(chat(max_tokens=4, n=3))
        chunks = [chunk async for chunk in call]
        trailing = dict(await call.trailing_metadata())
    roles: dict[int, str] = {}
    texts = {0: "", 1: "", 2: ""}
    for chunk in chunks:
        for choice in chunk.choices:
            if choice.delta.role:
                roles[choice.index] = choice.delta.role
            texts[choice.index] += choice.delta.content
    assert roles == {0: "assistant", 1: "assistant", 2: "assistant"}
    assert set(texts.values()) == {" the quick brown fox"}
    assert orjson.loads(trailing["x-meridian-timing"])["output_tokens"] == 12


async def test_models_unknown_model_and_fallback_before_first_token(
    grpc_engine: GrpcEngine,
) -> None:
    async with grpc_gateway(
        FaultConfig(unavailable_rate=1.0), FaultConfig(), engine=grpc_engine
    ) as door:
        models = await door.stub.ListModels(pb.ListModelsRequest())
        unknown = await _error_of(door.stub.ChatCompletion(chat(model="nope")))
        for _ in range(2):  # whichever backend round robin picks first, b2 serves it
            call = door.stub.ChatCompletion(chat(max_tokens=2))
            assert [c async for c in call]
            assert "backend=b2" in dict(await call.initial_metadata())["x-meridian-route"]
    assert [m.id for m in models.models] == [MODEL]
    assert unknown.code() is grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (FaultConfig(rate_limit_rate=1.0, retry_after_s=2.0), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (FaultConfig(refuse_connections=True), grpc.StatusCode.UNAVAILABLE),
    ],
)
async def test_overload_and_no_backend_carry_retry_info(
    fault: FaultConfig, expected: grpc.StatusCode, grpc_engine: GrpcEngine
) -> None:
    async with grpc_gateway(fault, engine=grpc_engine) as door:
        error = await _error_of(door.stub.ChatCompletion(chat()))
    assert error.code() is expected
    trailing = tuple(error.trailing_metadata() or ())
    assert "retry-after" in dict(trailing)
    assert retry_delay_s(decode_status_details(trailing)) is not None


async def test_invalid_argument_from_the_gateway_and_from_the_converter(
    grpc_engine: GrpcEngine,
) -> None:
    async with grpc_gateway(engine=grpc_engine) as door:
        empty = await _error_of(door.stub.ChatCompletion(pb.ChatCompletionRequest(model=MODEL)))
        zero_tokens = await _error_of(door.stub.ChatCompletion(chat(max_tokens=0)))
    assert empty.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert zero_tokens.code() is grpc.StatusCode.INVALID_ARGUMENT  # the gateway's own validation
    assert "max_tokens" in (zero_tokens.details() or "")


async def test_deadline_bounds_the_call_and_cancels_upstream(grpc_engine: GrpcEngine) -> None:
    async with grpc_gateway(
        FaultConfig(stall_rate=1.0, stall_ms=5_000), engine=grpc_engine
    ) as door:
        error = await _error_of(door.stub.ChatCompletion(chat(), timeout=0.4))
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        # Within the 5 s stall: a request left running would reach its first token after it.
        assert await wait_until(lambda: door.emulators[0].stats.cancelled == 1, 4.0)


async def test_cancel_mid_stream_cancels_upstream(grpc_engine: GrpcEngine) -> None:
    async with grpc_gateway(engine=grpc_engine) as door:
        call = door.stub.ChatCompletion(chat(max_tokens=2000))
        async for _ in call:
            break
        call.cancel()
        assert await wait_until(lambda: door.emulators[0].stats.cancelled == 1, 10.0)
        assert door.emulators[0].stats.completed == 0


async def test_mid_stream_failure_is_a_non_ok_status_with_timings(grpc_engine: GrpcEngine) -> None:
    async with grpc_gateway(
        FaultConfig(die_rate=1.0, die_after_tokens=3), engine=grpc_engine
    ) as door:
        call = door.stub.ChatCompletion(chat(max_tokens=50))
        received = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for chunk in call:
                received.append(chunk)
    assert caught.value.code() is grpc.StatusCode.INTERNAL
    assert received, "the failure came after the first token"
    summary = orjson.loads(dict(caught.value.trailing_metadata() or ())["x-meridian-timing"])
    assert summary["backend"] == "b1"


async def test_gateway_health_drains(grpc_engine: GrpcEngine) -> None:
    async with grpc_gateway(engine=grpc_engine) as door:
        health = health_pb2_grpc.HealthStub(door.channel)
        request = health_pb2.HealthCheckRequest(service="meridian.v1.Inference")
        assert (await health.Check(request)).status == health_pb2.HealthCheckResponse.SERVING
        await door.gateway.app[GRPC_SERVER].drain()
        assert (await health.Check(request)).status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_h2_connections_count_against_the_doors_connection_caps() -> None:
    """The gRPC listener's connections count against the HTTP door's caps (one budget of file
    descriptors): with one connection a client, the rig's channel holds it, another channel
    from the same address is refused before a byte is read, and is let in once it is freed."""
    door_caps = {"door": {"max_connections_per_client": 1}}
    async with grpc_gateway(engine="h2", **door_caps) as door:
        assert [chunk async for chunk in door.stub.ChatCompletion(chat(max_tokens=2))]
        target = door.gateway.app[GRPC_SERVER].target
        registry = door.gateway.app[METRICS].registry
        refused = {"reason": "per_client"}
        async with grpc.aio.insecure_channel(target, options=OWN_CONNECTION) as second:
            error = await _error_of(inference_stub(second).ChatCompletion(chat(max_tokens=2)))
        assert error.code() is grpc.StatusCode.UNAVAILABLE
        assert registry.get_sample_value("meridian_door_connections_refused_total", refused)
        await door.channel.close()
        assert await wait_until(lambda: registry.get_sample_value("meridian_door_connections") == 0)
        async with grpc.aio.insecure_channel(target, options=OWN_CONNECTION) as third:
            assert [chunk async for chunk in inference_stub(third).ChatCompletion(chat())]


async def test_grpcio_connections_are_capped_at_the_doors_total() -> None:
    """grpc.aio cannot count against the door's caps, so it counts its own connections against
    the door's total (``grpc.max_allowed_incoming_connections``; before, it took any number):
    the rig's channel holds the one place, another is refused, and gets in once it is freed."""
    async with grpc_gateway(engine="grpcio", door={"max_connections": 1}) as door:
        assert [chunk async for chunk in door.stub.ChatCompletion(chat(max_tokens=2))]
        target = door.gateway.app[GRPC_SERVER].target
        async with grpc.aio.insecure_channel(target, options=OWN_CONNECTION) as second:
            error = await _error_of(inference_stub(second).ChatCompletion(chat(max_tokens=2)))
        assert error.code() is grpc.StatusCode.UNAVAILABLE
        await door.channel.close()
        for _ in range(1_000):  # until grpc-core has seen the first connection go (bounded)
            async with grpc.aio.insecure_channel(target, options=OWN_CONNECTION) as third:
                try:
                    chunks = [c async for c in inference_stub(third).ChatCompletion(chat())]
                except grpc.aio.AioRpcError as retry:
                    assert retry.code() is grpc.StatusCode.UNAVAILABLE
                    continue
            assert chunks
            break
        else:
            raise AssertionError("the freed place was never given to a new connection")


async def test_the_h2_engines_own_closes_are_counted_by_reason() -> None:
    """``meridian_grpc_connections_closed_total{reason}``: every reason is there at 0 from the
    start (a rate over it exists before the first), and a client cut off for a PING flood is
    counted under its reason."""
    async with grpc_gateway(engine="h2") as door:
        registry = door.gateway.app[METRICS].registry

        def closed(reason: str) -> float | None:
            labels = {"reason": reason}
            return registry.get_sample_value("meridian_grpc_connections_closed_total", labels)

        assert {reason: closed(reason) for reason in CLOSE_REASONS} == dict.fromkeys(
            CLOSE_REASONS, 0.0
        )
        client = await RawClient.connect(door.gateway.app[GRPC_SERVER].port)
        for n in range(4):  # the first PING sets the clock; strikes 1, 2 and 3 (> 2)
            client.h2.ping(b"flood-%02d" % n)
        client.flush()
        await client.until_closed()
        await client.close()
        assert await wait_until(lambda: closed("too_many_pings") == 1.0)
        assert closed("max_age") == 0.0
