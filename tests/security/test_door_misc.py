"""The rest of the quick fixes: gRPC messages that do not decode, backend URLs the config refuses,
per-tenant admission gates that cannot grow without bound, and proxy headers on the explain
endpoint."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest

from gateway.admission import Admission
from gateway.config import AdmissionConfig, ConfigError, GateLimits, parse_config
from gateway.grpc.mount import GRPC_SERVER
from tests.gateway.support import FAST_ENGINE, MODEL, config_for
from tests.servers import EmulatorFactory, GatewayFactory, emulators, gateways


@pytest.fixture
async def rig() -> AsyncIterator[tuple[EmulatorFactory, GatewayFactory]]:
    async with emulators(MODEL, FAST_ENGINE) as emulator, gateways() as gateway:
        yield emulator, gateway


@pytest.mark.parametrize("method", ["ChatCompletion", "Completion", "ListModels"])
async def test_grpc_message_that_does_not_decode_is_invalid_argument(
    rig: tuple[EmulatorFactory, GatewayFactory], caplog: pytest.LogCaptureFixture, method: str
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    running = await gateway(
        config_for({"b1": backend.url}, listen={"host": "127.0.0.1", "port": 0, "grpc_port": 0})
    )
    caplog.set_level(logging.DEBUG)
    garbage = b"\xff\xff\xff\xff\x0f\x01"  # a varint that never ends: not any message
    async with grpc.aio.insecure_channel(running.app[GRPC_SERVER].target) as channel:
        path = f"/meridian.v1.Inference/{method}"
        if method == "ListModels":
            call = channel.unary_unary(path)(garbage)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
        else:
            stream = channel.unary_stream(path)(garbage)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in stream:
                    pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Traceback" not in caplog.text
    assert not any(record.exc_info for record in caplog.records)
    assert backend.stats.requests == 0


def _backend(url: str, **extra: object) -> dict[str, object]:
    return {"backends": [{"name": "b", "region": "r", "url": url, "models": ["m"], **extra}]}


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://0xA9FEA9FE/v1",
        "http://0xa9.0xfe.0xa9.0xfe/v1",
        "http://2852039166/v1",
        "http://0251.0376.0251.0376/v1",
        "http://169.254.169.254./v1",
        "http://[::ffff:169.254.169.254]/v1",
        "http://[fe80::1]:8000/v1",
        "http://[fd00:ec2::254]/v1",
        "http://metadata.google.internal/v1",
    ],
)
def test_link_local_and_metadata_backend_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match=r"backends\[0\].*link-local or a cloud metadata"):
        parse_config(_backend(url), "ops.yaml")
    parse_config(_backend(url, allow_link_local=True), "ops.yaml")  # the operator may insist


@pytest.mark.parametrize(
    "url", ["http://b1:8000/v1?api-version=2", "http://b1:8000/v1#x", "http://b1:8000/v1?"]
)
def test_backend_url_with_query_or_fragment_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match=r"ops.yaml: backends\[0\].*no query string or fragment"):
        parse_config(_backend(url), "ops.yaml")


def test_ordinary_backend_urls_pass() -> None:
    for url in ("http://127.0.0.1:8000/v1", "https://vllm.internal:443", "http://10.0.0.5:80/v1"):
        parse_config(_backend(url), "ops.yaml")


async def test_tenant_gates_are_dropped_when_idle() -> None:
    admission = Admission(
        AdmissionConfig(per_tenant=GateLimits(max_concurrent=2, max_queue=1), queue_timeout_s=5)
    )
    held = [await admission.admit(MODEL, f"tenant-{i}") for i in range(3)]
    assert admission.gate_count == 3
    for ticket in held:
        ticket.release()
    assert admission.gate_count == 0
    for i in range(60_000):  # every request from a new tenant name
        (await admission.admit(MODEL, f"rotating-{i}")).release()
    assert admission.gate_count == 0


async def test_tenant_gate_survives_while_queued_and_limit_still_holds() -> None:
    admission = Admission(
        AdmissionConfig(per_tenant=GateLimits(max_concurrent=1, max_queue=1), queue_timeout_s=5)
    )
    first = await admission.admit(MODEL, "t")
    waiter = asyncio.ensure_future(admission.admit(MODEL, "t"))
    await asyncio.sleep(0)  # one loop turn: the task runs until it waits in the queue
    assert _queued(admission)
    first.release()  # the slot passes to the waiter: the gate is still in use
    second = await waiter
    assert admission.gate_count == 1
    second.release()
    assert admission.gate_count == 0


def _queued(admission: Admission) -> bool:
    return any(gate.waiters for gate in admission._gates.values())


@pytest.mark.parametrize(
    "header",
    ["True-Client-IP", "CF-Connecting-IP", "X-Client-IP", "Fastly-Client-IP", "X-Forwarded-For"],
)
async def test_explain_route_refuses_any_proxy_header(
    rig: tuple[EmulatorFactory, GatewayFactory], header: str
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    url = running.url + "/v1/meridian/route"
    async with aiohttp.ClientSession() as session:
        async with session.get(url, params={"model": MODEL, "prompt": "hi"}) as r:
            assert r.status == 200
        async with session.get(
            url, params={"model": MODEL, "prompt": "hi"}, headers={header: "127.0.0.1"}
        ) as r:
            assert r.status == 403
