"""A bug below the door before the first token — here the router's own invariant failing, as
an ``assert`` in routing/ would — is an impossible state, not a crash: logged once with the
request id (and its traceback, for the operator), the client gets its door's own 500 naming
the request id and nothing internal, the request is counted once and holds nothing after."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import grpc
import pytest

from gateway.app import start_gateway
from gateway.config import parse_config
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from gateway.state_keys import RELAY
from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.server import start_emulated_backend
from routing.types import Decision, FleetSnapshot, RequestProfile
from tests.grpc.grpc_support import FAST_ENGINE, MODEL, chat
from tests.reliability.support import metric_value
from tests.routers import DelegatingRouter, wrap_router
from tests.servers import settle


class InvariantBrokenRouter(DelegatingRouter):
    """The real router, except that its decision hits a broken invariant."""

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        raise AssertionError("a routing invariant, broken")


@pytest.fixture
async def broken() -> AsyncIterator[Any]:
    async with AsyncExitStack() as stack:
        emulator = await start_emulated_backend(
            EmulatedBackendConfig(name="b1", models=(MODEL,), engine=FAST_ENGINE)
        )
        stack.push_async_callback(emulator.close)
        data: dict[str, Any] = {
            "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": 0},
            "backends": [
                {"name": "b1", "region": "local", "url": emulator.url + "/v1", "models": [MODEL]}
            ],
        }

        break_routing = wrap_router(InvariantBrokenRouter, [])
        gateway = await start_gateway(parse_config(data, "<fault-test>"), prepare=break_routing)
        stack.push_async_callback(gateway.close)
        yield gateway


def _chat_body() -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("door", ["/v1/chat/completions", "/v1/messages"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_broken_routing_invariant_is_the_doors_500_with_the_request_id(
    broken: Any, door: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    async with aiohttp.ClientSession() as session:
        body = {**_chat_body(), "stream": stream}
        async with session.post(broken.url + door, json=body) as reply:
            status, text = reply.status, await reply.text()
            request_id = reply.headers.get("X-Request-Id", "")
    assert status == 500, text
    assert request_id and request_id in text
    assert "invariant" not in text and "Assertion" not in text and "Traceback" not in text
    if door == "/v1/messages":
        assert '"type":"error"' in text.replace(" ", "")
    else:
        assert '"code":"internal_error"' in text.replace(" ", "")
    logged = [r for r in caplog.records if r.name == "meridian.impossible"]
    [record] = [r for r in logged if request_id in r.getMessage()]  # once, with the traceback
    assert record.exc_info is not None
    assert not [r for r in caplog.records if "unhandled error" in r.getMessage()]
    relay = broken.app[RELAY]
    await settle(lambda: relay.state.active == 0 and relay.drain.in_flight == 0)
    endpoint = "messages" if door == "/v1/messages" else "chat"
    labels = {"protocol": "http", "endpoint": endpoint, "model": MODEL, "status": "500"}
    assert metric_value(broken, "meridian_requests_total", labels) == 1


async def test_a_broken_routing_invariant_is_internal_on_the_grpc_door(
    broken: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    async with grpc.aio.insecure_channel(broken.app[GRPC_SERVER].target) as channel:
        call = inference_stub(channel).ChatCompletion(chat(max_tokens=4))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
    assert caught.value.code() is grpc.StatusCode.INTERNAL
    details = caught.value.details() or ""
    assert "quote request id" in details and "invariant" not in details
    assert any(r.name == "meridian.impossible" for r in caplog.records)
    relay = broken.app[RELAY]
    await settle(lambda: relay.state.active == 0 and relay.drain.in_flight == 0)
