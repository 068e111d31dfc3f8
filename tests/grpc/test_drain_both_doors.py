"""A gateway drained with streams open on both doors reports them the same way, and neither
door counts them against the backend: its ejection state and the router's learner inputs
stay as they were (the ending is classified once, in gateway/lifecycle/outcome.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
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
from gateway.state_keys import METRICS, RELAY
from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.server import start_emulated_backend
from tests.grpc.grpc_support import FAST_ENGINE, MODEL, chat
from tests.routers import RecordingRouter, wrap_router
from tests.servers import settle

SLOW = FAST_ENGINE.model_copy(update={"decode_base_ms": 20.0})  # 500 tokens: 10 s


@pytest.fixture
async def rig(grpc_engine: GrpcEngine) -> AsyncIterator[tuple[Any, Any, RecordingRouter]]:
    async with AsyncExitStack() as stack:
        emulator = await start_emulated_backend(
            EmulatedBackendConfig(name="b1", models=(MODEL,), engine=SLOW)
        )
        stack.push_async_callback(emulator.close)
        data: dict[str, Any] = {
            "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": 0, "grpc_engine": grpc_engine},
            "backends": [
                {"name": "b1", "region": "local", "url": emulator.url + "/v1", "models": [MODEL]}
            ],
            "timeouts": {"first_token_s": 30.0},
            # One failure would eject b1 (even as the only backend), had it counted as one.
            "signals": {
                "outlier": {
                    "consecutive_failures": 1,
                    "max_ejection_percent": 100.0,
                    "panic_threshold": 0.0,
                },
                "probes": {"enabled": False},
                "engine_metrics": {"enabled": False},
            },
        }
        recorder: list[RecordingRouter] = []
        record_learning = wrap_router(RecordingRouter, recorder)
        gateway = await start_gateway(parse_config(data, "<drain-test>"), prepare=record_learning)
        stack.push_async_callback(gateway.close)
        channel = await stack.enter_async_context(
            grpc.aio.insecure_channel(gateway.app[GRPC_SERVER].target)
        )
        yield gateway, inference_stub(channel), recorder[0]


async def test_drain_ends_streams_on_both_doors_without_blaming_the_backend(
    rig: tuple[Any, Any, RecordingRouter],
) -> None:
    gateway, stub, router = rig
    relay = gateway.app[RELAY]
    body = {
        "model": MODEL,
        "stream": True,
        "max_tokens": 500,
        "messages": [{"role": "user", "content": "hi"}],
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(gateway.url + "/v1/chat/completions", json=body) as http:
            assert http.status == 200
            assert await http.content.readany()  # the HTTP stream is running
            call = stub.ChatCompletion(chat(max_tokens=500))
            first = await call.read()  # the gRPC stream is running
            assert first.choices
            await settle(lambda: relay.drain.in_flight == 2)
            ended = relay.drain.end_everything()  # the drain deadline, with both still open
            rest = (await http.read()).decode()
    assert ended == 2
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        while await call.read() is not grpc.aio.EOF:
            pass
    # Each door tells its client in its own protocol that the gateway is draining.
    http_errors = [
        orjson.loads(line[6:])["error"]["code"]
        for line in rest.split("\n")
        if line.startswith("data: {") and '"error"' in line
    ]
    assert http_errors == ["gateway_draining"]
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in (caught.value.details() or "")
    await settle(lambda: relay.fleet.in_flight("b1") == 0 and relay.drain.in_flight == 0)
    # Neither counted against b1: not ejected, no failure taught to the learner.
    assert relay.fleet.health().ejected_until == {}
    assert [o for o in router.observed if not o.ok] == []
    assert router.first_tokens == ["b1", "b1"]  # what was learned at the first tokens stands
    # And both doors report the ending the same way in meridian_requests_total.
    samples = {
        (s.labels["protocol"], s.labels["status"]): s.value
        for family in gateway.app[METRICS].registry.collect()
        for s in family.samples
        if s.name == "meridian_requests_total"
    }
    assert samples == {("http", "cancelled"): 1.0, ("grpc", "cancelled"): 1.0}
