"""Per-tenant cache_salt for vLLM backends: derived from the key's tenant with the gateway's
secret, replacing whatever the client sent; other engines and unset secrets leave the body be."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator

import aiohttp
import pytest

from gateway.config import parse_config
from tests.security.auth_support import CHAT, MODEL, issue, recording_backend
from tests.servers import GatewayFactory, gateways

SECRET = "salt-secret-for-tests"


@pytest.fixture
async def gateway() -> AsyncIterator[GatewayFactory]:
    async with gateways() as make:
        yield make


def _config(url: str, engine: str, keys: list[dict[str, object]], salted: bool) -> object:
    auth: dict[str, object] = {"keys": keys}
    if salted:
        auth["cache_salt_secret_env"] = "MERIDIAN_SALT_SECRET"
    backend = {"name": "b1", "region": "local", "url": url + "/v1", "models": [MODEL]}
    return parse_config(
        {"backends": [{**backend, "engine": engine}], "auth": auth, "chain": {"id": "gw-salt"}},
        "<test>",
    )


async def _send(url: str, headers: dict[str, str], body: dict[str, object]) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200


def _expected(tenant: str) -> str:
    return hmac.new(SECRET.encode(), tenant.encode(), hashlib.sha256).hexdigest()


async def test_vllm_backends_get_the_tenants_salt_and_never_the_clients(
    gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MERIDIAN_SALT_SECRET", SECRET)
    acme, acme2, beta = issue("acme"), issue("acme"), issue("beta")
    async with recording_backend() as recorder:
        running = await gateway(
            _config(recorder.url, "vllm", [acme.entry, acme2.entry, beta.entry], True)
        )
        await _send(running.url, acme.headers, CHAT)
        await _send(running.url, acme2.headers, {**CHAT, "cache_salt": _expected("beta")})
        await _send(running.url, beta.headers, CHAT)
    salts = [body["cache_salt"] for body in recorder.bodies]
    assert salts == [_expected("acme"), _expected("acme"), _expected("beta")]
    assert all(body["messages"] == CHAT["messages"] for body in recorder.bodies)


@pytest.mark.parametrize(("engine", "salted"), [("sglang", True), ("vllm", False)])
async def test_other_engines_or_no_secret_leave_the_body_alone(
    gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch, engine: str, salted: bool
) -> None:
    monkeypatch.setenv("MERIDIAN_SALT_SECRET", SECRET)
    key = issue("acme")
    async with recording_backend() as recorder:
        running = await gateway(_config(recorder.url, engine, [key.entry], salted))
        await _send(running.url, key.headers, CHAT)
    assert "cache_salt" not in recorder.bodies[0]
