"""Canary keys on every error path: what the client, the logs and /metrics see holds neither the
backend's API key nor the client's, nor internal addresses or exception text."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest

from gateway.app import RunningGateway
from gateway.config import parse_config
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from proto.meridian.v1 import inference_pb2 as pb
from tests.security.leaky_backend import (
    BACKEND_CANARY,
    CLIENT_CANARY,
    LeakyBackend,
    leaky_backend,
)
from tests.servers import GatewayFactory, gateways

MODEL = "test-model"
SECRETS = (BACKEND_CANARY, CLIENT_CANARY)
FORBIDDEN = (*SECRETS, "10.11.12.13", "ConnectionKey", "Traceback")
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
HEADERS = {"Authorization": f"Bearer {CLIENT_CANARY}"}


def assert_clean(text: str | bytes, forbidden: tuple[str, ...] = FORBIDDEN) -> None:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    for needle in forbidden:
        assert needle not in text, f"{needle!r} leaked: {text[:400]}"


@pytest.fixture
async def gateway() -> AsyncIterator[GatewayFactory]:
    async with gateways() as make:
        yield make


@pytest.fixture
def backend_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LEAKY_BACKEND_KEY", BACKEND_CANARY)
    return "LEAKY_BACKEND_KEY"


def _config(url: str, env: str, **extra: object) -> object:
    data: dict[str, object] = {
        "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": 0},
        "backends": [
            {
                "name": "b1",
                "region": "local",
                "url": url + "/v1",
                "models": [MODEL],
                "api_key": {"env": env},
            }
        ],
        "timeouts": {"first_token_s": 5.0},
        "limits": {"max_attempts": 1},
    }
    data.update(extra)
    return parse_config(data, "<test>")


async def _post(url: str, body: object, backend: LeakyBackend | None = None) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body, headers=HEADERS) as r:
            if backend is not None:  # headers are here: the first token was relayed
                backend.release.set()
            return r.status, await r.read()


async def _scrape(running: RunningGateway) -> bytes:
    async with aiohttp.ClientSession() as session:
        out = b""
        for path in ("/metrics", "/readyz", "/v1/meridian/state"):
            async with session.get(running.admin_url + path) as r:
                assert r.status == 200
                out += await r.read()
        return out


@pytest.mark.parametrize(
    ("mode", "stream", "status"),
    [
        ("401", False, 502),
        ("500", False, 502),
        ("401", True, 502),
        ("event_first", True, 502),
        ("event_mid", True, 200),
        ("400", False, 400),
    ],
)
async def test_upstream_error_text_never_reaches_the_client(
    gateway: GatewayFactory,
    backend_key: str,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    stream: bool,
    status: int,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with leaky_backend(mode) as backend:
        running = await gateway(_config(backend.url, backend_key))
        got, body = await _post(running.url, {**CHAT, "stream": stream}, backend)
        assert got == status
        assert backend.requests == 1
        assert backend.seen_auth == [f"Bearer {BACKEND_CANARY}"]  # the canary really was in play
        assert_clean(body)
        if mode == "event_mid":
            assert b'"error"' in body  # the break is reported, in Meridian's words
        if mode == "400":  # the client's own fault: the backend's words pass, scrubbed
            assert b"maximum context length is 4096 tokens" in body
        assert_clean(await _scrape(running))
    assert_clean(caplog.text, SECRETS)  # logs may name addresses for the operator; never keys


async def test_sse_error_event_after_early_headers_is_clean(
    gateway: GatewayFactory, backend_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with leaky_backend("401") as backend:
        config = _config(backend.url, backend_key, streams={"early_headers": "always"})
        running = await gateway(config)
        got, body = await _post(running.url, {**CHAT, "stream": True})
        assert got == 200  # headers were committed before the failure
        assert b"data: " in body and b'"error"' in body
        assert_clean(body)
    assert_clean(caplog.text, SECRETS)  # logs may name addresses for the operator; never keys


async def test_connect_failure_names_no_address(
    gateway: GatewayFactory, backend_key: str, unused_tcp_port: int
) -> None:
    running = await gateway(_config(f"http://127.0.0.1:{unused_tcp_port}", backend_key))
    got, body = await _post(running.url, CHAT)
    assert got in (502, 503)
    assert_clean(body)
    assert f":{unused_tcp_port}".encode() not in body
    assert b"127.0.0.1" not in body


@pytest.mark.parametrize("grpc_engine", ["grpcio", "h2"])
@pytest.mark.parametrize("mode", ["401", "500", "event_mid"])
async def test_grpc_details_are_clean(
    gateway: GatewayFactory,
    backend_key: str,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    grpc_engine: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with leaky_backend(mode) as backend:
        listen = {"host": "127.0.0.1", "port": 0, "grpc_port": 0, "grpc_engine": grpc_engine}
        running = await gateway(_config(backend.url, backend_key, listen=listen))
        target = running.app[GRPC_SERVER].target
        request = pb.ChatCompletionRequest(
            model=MODEL, messages=[pb.ChatMessage(role="user", text="hello")], max_tokens=4
        )
        async with grpc.aio.insecure_channel(target) as channel:
            stub = inference_stub(channel)
            metadata = (("authorization", HEADERS["Authorization"]),)
            call = stub.ChatCompletion(request, metadata=metadata)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in call:
                    backend.release.set()  # the first chunk is here: now break the stream
        error = caught.value
        assert error.code() != grpc.StatusCode.OK
        assert_clean(error.details() or "")
        for _, value in error.trailing_metadata() or ():
            assert_clean(value if isinstance(value, bytes) else value.encode())
        assert backend.requests == 1
    assert_clean(caplog.text, SECRETS)  # logs may name addresses for the operator; never keys


async def test_backend_reached_is_leaky(backend_key: str) -> None:
    """The rig itself: the canary really is in the upstream's answer (else the tests prove nothing)."""
    async with leaky_backend("401") as backend:
        async with aiohttp.ClientSession() as session:
            async with session.post(
                backend.url + "/v1/chat/completions",
                json=CHAT,
                headers={"Authorization": f"Bearer {BACKEND_CANARY}"},
            ) as r:
                assert BACKEND_CANARY.encode() in await r.read()
