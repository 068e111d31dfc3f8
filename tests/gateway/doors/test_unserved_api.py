"""A backend that answers 501 (or 404 for an API path it has no route for) does not serve that
API: that is not a backend fault. The gateway tries the next candidate; outlier detection and
the router's learner hear nothing of it; when no candidate serves the API, the client gets a
clear protocol-native error (HTTP 501 / 404, gRPC UNIMPLEMENTED / NOT_FOUND)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, Literal

import grpc
import openai
import pytest

from gateway.app import RunningGateway, start_gateway
from gateway.config import parse_config
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from gateway.state_keys import RELAY
from loadtests.emulator.config import EmulatedBackendConfig, FaultConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend
from proto.meridian.v1 import inference_pb2 as pb
from tests.grpc.grpc_support import FAST_ENGINE
from tests.reliability.support import metric_value
from tests.routers import RecordingRouter, wrap_router

MODEL = "unserved-model"
Rig = tuple[RunningGateway, dict[str, RunningEmulator], RecordingRouter]
Start = Callable[..., Awaitable[Rig]]


def _unserved(status: Literal[404, 501]) -> FaultConfig:
    return FaultConfig(unserved_paths=("/v1/embeddings",), unserved_status=status)


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    async with AsyncExitStack() as stack:

        async def make(**faults: FaultConfig) -> Rig:
            emulators = {}
            for name, fault in faults.items():
                emulator = await start_emulated_backend(
                    EmulatedBackendConfig(
                        name=name, models=(MODEL,), engine=FAST_ENGINE, faults=fault
                    )
                )
                stack.push_async_callback(emulator.close)
                emulators[name] = emulator
            data: dict[str, Any] = {
                "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": 0},
                "backends": [
                    {"name": n, "region": "local", "url": e.url + "/v1", "models": [MODEL]}
                    for n, e in emulators.items()
                ],
                "routing": {"policy": "round_robin"},
                "timeouts": {"first_token_s": 30.0},
                # One backend fault would eject a backend, had an unserved API counted as one.
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
            config = parse_config(data, "<unserved-test>")
            gateway = await start_gateway(config, prepare=record_learning)
            stack.push_async_callback(gateway.close)
            return gateway, emulators, recorder[0]

        yield make


def _untouched(gateway: RunningGateway, router: RecordingRouter, backend: str) -> None:
    """Neither outlier detection nor the learner heard of ``backend``'s unserved answers."""
    health = gateway.app[RELAY].fleet.health()
    assert backend in health.usable and backend not in health.ejected_until
    assert not [o for o in router.observed if o.backend == backend]


@pytest.mark.parametrize("status", [501, 404])
async def test_an_unserved_api_moves_to_the_next_backend_and_blames_no_one(
    start: Start, status: Literal[404, 501]
) -> None:
    gateway, emulators, router = await start(plain=_unserved(status), full=FaultConfig())
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    for _ in range(2):  # round robin starts on either: plain's answer moves it on to full
        raw = await client.embeddings.with_raw_response.create(model=MODEL, input="x")
        assert "backend=full" in raw.headers["x-meridian-route"]
    _untouched(gateway, router, "plain")
    unserved = {"backend": "plain", "outcome": "unserved"}
    assert metric_value(gateway, "meridian_upstream_attempts_total", unserved) >= 1
    assert emulators["plain"].stats.errors == 0
    assert [o for o in router.observed if o.backend == "full"]  # the winner is learned from
    # plain still serves chat: it was never ejected.
    for _ in range(2):
        raw_chat = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert raw_chat.parse().choices
    await client.close()
    assert any(o.backend == "plain" and o.ok for o in router.observed)


@pytest.mark.parametrize(
    ("status", "code", "grpc_code"),
    [
        (501, "not_implemented", grpc.StatusCode.UNIMPLEMENTED),
        (404, "not_served", grpc.StatusCode.NOT_FOUND),
    ],
)
async def test_no_backend_serving_the_api_is_a_clear_error_on_both_doors(
    start: Start, status: Literal[404, 501], code: str, grpc_code: grpc.StatusCode
) -> None:
    gateway, _, router = await start(plain=_unserved(status))
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIStatusError) as refused:
        await client.embeddings.create(model=MODEL, input="x")
    await client.close()
    assert refused.value.status_code == status
    body = refused.value.body
    assert isinstance(body, dict) and body.get("code") == code
    async with grpc.aio.insecure_channel(gateway.app[GRPC_SERVER].target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await inference_stub(channel).Embeddings(pb.EmbeddingsRequest(model=MODEL, text="x"))
    assert failed.value.code() is grpc_code
    _untouched(gateway, router, "plain")
