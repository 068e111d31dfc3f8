"""Early rejection through a real gateway: a deadline no backend can meet is refused before
any upstream work (the emulator sees no request), on HTTP and on gRPC."""

from __future__ import annotations

from typing import Any

import aiohttp
import grpc
import pytest

from gateway.config import GatewayConfig, parse_config
from gateway.early_rejection import DEADLINE_HEADER
from gateway.grpc.client import inference_stub
from gateway.grpc.convert import decode_status_details, retry_delay_s
from gateway.grpc.mount import GRPC_SERVER
from gateway.state_keys import METRICS, RELAY
from proto.meridian.v1 import inference_pb2 as pb
from routing.pipeline.router import PipelineRouter
from tests.gateway.support import MODEL, EmulatorFactory, GatewayFactory

# The only backend is this far by the region table (probes are off, so nothing measures it
# nearer): no first token is predicted sooner, while the emulator itself answers at once, so
# the requests that are let through stay quick and a client deadline of a second leaves the
# gateway ample time to refuse on a busy machine.
FAR_MS = 3000.0
PROMPT = "a question nobody must see in an error"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 2}


def _config(url: str, **extra: Any) -> GatewayConfig:
    return parse_config(
        {
            "region": "here",
            "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": 0},
            "regions": [{"name": "here", "rtt_ms": 1}, {"name": "far", "rtt_ms": FAR_MS}],
            "backends": [{"name": "far-1", "region": "far", "url": url + "/v1", "models": [MODEL]}],
            "signals": {"probes": {"enabled": False}},
            "objectives": {
                "classes": {
                    "live": {"ttft_ms": 100, "reject_if_unmeetable": True},
                    "patient": {"ttft_ms": 100},
                },
                "tenants": {"live": "live", "patient": "patient"},
                "early_rejection": {"header": {"allow": True, "min_ms": 10}},
            },
            **extra,
        },
        "<test>",
    )


async def _post(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/chat/completions", json=CHAT, headers=headers) as response,
    ):
        return response.status, dict(response.headers), await response.json()


async def test_a_deadline_out_of_reach_is_refused_before_any_upstream_request(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    far = await emulator("far-1")
    running = await gateway(_config(far.url))
    status, headers, body = await _post(running.url, {DEADLINE_HEADER: "100"})
    assert status == 503
    assert int(headers["Retry-After"]) >= 1
    error = body["error"]
    assert error["code"] == "deadline_unmeetable" and error["type"] == "service_unavailable"
    assert " ms left, and the fastest backend" in error["message"]
    assert "even with no queue" in error["message"]
    assert PROMPT not in error["message"] and "127.0.0.1" not in error["message"]
    assert far.stats.requests == 0
    registry = running.app[METRICS].registry
    assert registry.get_sample_value("meridian_early_rejections_total", {"class": "none"}) == 1
    router = running.app[RELAY].router
    inner = getattr(router, "inner", router)  # under the shared-state bridge, if any
    assert isinstance(inner, PipelineRouter)
    assert inner.ledger.open_count("far-1", 0.0) == 0  # the reservation was released
    status, _, _ = await _post(running.url, {DEADLINE_HEADER: "20000"})
    assert status == 200 and far.stats.requests == 1


async def test_a_class_that_rejects_when_unmeetable_and_one_that_does_not(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    far = await emulator("far-1")
    running = await gateway(_config(far.url))
    status, _, body = await _post(running.url, {"X-Meridian-Tenant": "live"})
    assert status == 503 and body["error"]["code"] == "deadline_unmeetable"
    assert far.stats.requests == 0
    registry = running.app[METRICS].registry
    assert registry.get_sample_value("meridian_early_rejections_total", {"class": "live"}) == 1
    status, _, _ = await _post(running.url, {"X-Meridian-Tenant": "patient"})
    assert status == 200 and far.stats.requests == 1  # an objective alone is no deadline


@pytest.mark.parametrize("value", ["1", "soon", "nan"])
async def test_a_bad_deadline_header_is_a_400(
    emulator: EmulatorFactory, gateway: GatewayFactory, value: str
) -> None:
    far = await emulator("far-1")
    running = await gateway(_config(far.url))
    status, _, body = await _post(running.url, {DEADLINE_HEADER: value})
    assert status == 400 and body["error"]["code"] == "invalid_deadline"


async def test_the_header_is_ignored_unless_allowed(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    far = await emulator("far-1")
    running = await gateway(_config(far.url, objectives={}))
    status, _, _ = await _post(running.url, {DEADLINE_HEADER: "100"})
    assert status == 200 and far.stats.requests == 1


async def test_a_grpc_deadline_out_of_reach_is_unavailable_with_retry_info(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    far = await emulator("far-1")
    running = await gateway(_config(far.url))
    target = running.app[GRPC_SERVER].target
    request = pb.ChatCompletionRequest(
        model=MODEL, messages=[pb.ChatMessage(role="user", text=PROMPT)], max_tokens=2
    )
    async with grpc.aio.insecure_channel(target) as channel:
        call = inference_stub(channel).ChatCompletion(request, timeout=1.0)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
    error = caught.value
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert "deadline" in (error.details() or "")
    trailing = tuple(error.trailing_metadata() or ())
    assert retry_delay_s(decode_status_details(trailing)) is not None
    assert far.stats.requests == 0
