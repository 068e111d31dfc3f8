"""API keys at the HTTP door: 401/403 in OpenAI's shape, the tenant from the key, admin scope,
explicit or refused 'off', trusted listeners, and hop keys carrying the tenant between
gateways."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest

from gateway.app import start_gateway
from gateway.auth.keys import digest
from gateway.config import ConfigError, parse_config
from gateway.grpc.mount import GRPC_SERVER
from loadtests.emulator.config import FaultConfig
from tests.gateway.support import FAST_ENGINE, config_for
from tests.security.auth_support import (
    CHAT,
    MODEL,
    grpc_call,
    issue,
    recording_backend,
    until,
)
from tests.servers import EmulatorFactory, GatewayFactory, emulators, gateways


@pytest.fixture
async def rig() -> AsyncIterator[tuple[EmulatorFactory, GatewayFactory]]:
    async with emulators(MODEL, FAST_ENGINE) as emulator, gateways() as gateway:
        yield emulator, gateway


async def _post(url: str, headers: dict[str, str], body: Any = CHAT) -> tuple[int, Any, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            return r.status, await r.json(), r.headers


async def test_missing_bad_expired_and_forbidden_keys(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    good = issue("acme")
    other_model = issue("acme", models=["another-model"])
    admin_only = issue("ops", scopes=["admin"])
    expired = issue("acme", expired=True)
    keys = [k.entry for k in (good, other_model, admin_only, expired)]
    running = await gateway(config_for({"b1": backend.url}, auth={"mode": "keys", "keys": keys}))
    forged = good.key[:-4] + ("aaaa" if not good.key.endswith("aaaa") else "bbbb")
    cases = [
        ({}, 401, "invalid_api_key"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, 401, "invalid_api_key"),
        ({"Authorization": "Bearer sk-whatever"}, 401, "invalid_api_key"),
        ({"Authorization": f"Bearer {forged}"}, 401, "invalid_api_key"),
        (expired.headers, 401, "invalid_api_key"),
        (other_model.headers, 403, "model_not_allowed"),
        (admin_only.headers, 403, "insufficient_scope"),
    ]
    for headers, status, code in cases:
        got, body, response_headers = await _post(running.url, headers)
        assert (got, body["error"]["code"]) == (status, code), headers
        assert body["error"]["type"] and body["error"]["message"]
        if status == 401:
            assert response_headers["WWW-Authenticate"].startswith("Bearer")
    assert backend.stats.requests == 0  # nothing refused reached a backend
    got, body, _ = await _post(running.url, good.headers)
    assert got == 200 and body["choices"]
    async with aiohttp.ClientSession() as session:
        async with session.get(running.url + "/v1/models") as r:
            assert r.status == 401
        async with session.get(running.url + "/v1/models", headers=good.headers) as r:
            assert r.status == 200
        async with session.get(running.url + "/healthz") as r:  # probes need no key
            assert r.status == 200


async def test_the_tenant_comes_from_the_key_not_the_header(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1", faults=FaultConfig(stall_ms=60_000.0))
    key = issue("acme")
    running = await gateway(
        config_for(
            {"b1": backend.url},
            auth={"keys": [key.entry]},  # mode unset: on, because keys are configured
            admission={"per_tenant": {"max_concurrent": 1, "max_queue": 0}},
        )
    )
    first = asyncio.ensure_future(_post(running.url, {**key.headers, "X-Meridian-Tenant": "a"}))
    await until(lambda: backend.stats.requests >= 1)  # the first request holds acme's only slot
    # Rotating the header does not buy another tenant's slot: the key says acme.
    got, body, _ = await _post(running.url, {**key.headers, "X-Meridian-Tenant": "b"})
    assert (got, body["error"]["code"]) == (429, "tenant_over_limit")
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)


async def test_admin_scope_reaches_introspection_on_the_public_listener(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    admin, user = issue("ops", scopes=["admin"]), issue("acme")
    running = await gateway(
        config_for({"b1": backend.url}, auth={"keys": [admin.entry, user.entry]})
    )
    async with aiohttp.ClientSession() as session:
        for headers, status in (({}, 401), (user.headers, 404), (admin.headers, 200)):
            async with session.get(running.url + "/metrics", headers=headers) as r:
                assert r.status == status, headers
        async with session.get(running.admin_url + "/metrics") as r:  # the admin socket: no key
            assert r.status == 200


async def test_auth_off_is_explicit_and_logged(
    rig: tuple[EmulatorFactory, GatewayFactory], caplog: pytest.LogCaptureFixture
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    caplog.set_level(logging.INFO, logger="meridian.auth")
    running = await gateway(config_for({"b1": backend.url}, auth={"mode": "off"}))
    assert "auth is OFF (auth.mode: off)" in caplog.text
    got, _, _ = await _post(running.url, {})
    assert got == 200
    caplog.clear()
    await gateway(config_for({"b1": backend.url}))  # unset, on loopback: off, and it says so
    assert "auth is OFF because 'auth' is not configured" in caplog.text


async def test_unconfigured_auth_refuses_a_non_loopback_listener(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, _ = rig
    backend = await emulator("b1")
    with pytest.raises(ConfigError, match="'auth' is not configured"):
        await start_gateway(config_for({"b1": backend.url}), "0.0.0.0", 0)


async def test_trusted_listener_believes_the_tenant_header(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1", faults=FaultConfig(stall_ms=60_000.0))
    running = await gateway(
        config_for(
            {"b1": backend.url},
            auth={"mode": "keys", "trusted_listener": True},
            admission={"per_tenant": {"max_concurrent": 1, "max_queue": 0}},
        )
    )
    first = asyncio.ensure_future(_post(running.url, {"X-Meridian-Tenant": "a"}))
    await until(lambda: backend.stats.requests >= 1)
    second = asyncio.ensure_future(_post(running.url, {"X-Meridian-Tenant": "b"}))
    await until(
        lambda: backend.stats.requests >= 2
    )  # tenant b has a slot of its own: it reaches the backend
    got, body, _ = await _post(running.url, {"X-Meridian-Tenant": "a"})
    assert (got, body["error"]["code"]) == (429, "tenant_over_limit")
    for task in (first, second):
        task.cancel()
    await asyncio.gather(first, second, return_exceptions=True)


async def test_chained_gateways_carry_the_tenant_with_a_hop_key(
    rig: tuple[EmulatorFactory, GatewayFactory], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, gateway = rig
    hop_secret = "hop-secret-between-regions-0123456789"
    monkeypatch.setenv("HOP_SECRET", hop_secret)
    client_key = issue("acme")
    async with recording_backend() as recorder:
        downstream = await gateway(
            config_for(
                {"c1": recorder.url}, auth={"mode": "keys", "hop_keys": [digest(hop_secret)]}
            )
        )
        upstream = await gateway(
            parse_config(
                {
                    "backends": [
                        {
                            "name": "gw-c",
                            "region": "local",
                            "kind": "gateway",
                            "url": downstream.url + "/v1",
                            "models": [MODEL],
                            "api_key": {"env": "HOP_SECRET"},
                        }
                    ],
                    "timeouts": {"first_token_s": 5.0},
                    "auth": {"keys": [client_key.entry]},
                    "chain": {"id": "gw-a"},
                },
                "<test>",
            )
        )
        got, _, _ = await _post(upstream.url, {**client_key.headers, "X-Meridian-Tenant": "evil"})
        assert got == 200
        assert recorder.tenants == ["acme"]  # the key's tenant, carried by the hop
        # Straight to the downstream gateway without the hop secret: refused, whatever it claims.
        for headers in ({"X-Meridian-Tenant": "acme"}, {"Authorization": "Bearer not-the-secret"}):
            got, body, _ = await _post(downstream.url, headers)
            assert (got, body["error"]["code"]) == (401, "invalid_api_key")
        assert recorder.tenants == ["acme"]


async def test_the_grpc_door_carries_the_tenant_over_an_authenticated_hop(
    rig: tuple[EmulatorFactory, GatewayFactory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Client -> gateway A over gRPC -> gateway B (a kind: gateway backend) -> engine: B acts
    for the tenant of the client's key, told by A with the hop secret; without it B refuses."""
    _, gateway = rig
    hop_secret = "hop-secret-between-regions-0123456789"
    monkeypatch.setenv("HOP_SECRET", hop_secret)
    client_key = issue("acme")
    grpc_listen = {"host": "127.0.0.1", "port": 0, "grpc_port": 0}
    async with recording_backend() as recorder:
        downstream = await gateway(
            config_for(
                {"c1": recorder.url},
                listen=grpc_listen,
                auth={"mode": "keys", "hop_keys": [digest(hop_secret)]},
            )
        )

        def upstream_config(api_key: dict[str, str] | None) -> dict[str, Any]:
            hop: dict[str, Any] = {"name": "gw-b", "region": "local", "kind": "gateway"}
            hop |= {"url": downstream.url + "/v1", "models": [MODEL]}
            if api_key is not None:
                hop["api_key"] = api_key
            return {
                "backends": [hop],
                "listen": grpc_listen,
                "timeouts": {"first_token_s": 5.0},
                "auth": {"keys": [client_key.entry]},
                "chain": {"id": "gw-a"},
            }

        upstream = await gateway(parse_config(upstream_config({"env": "HOP_SECRET"}), "<test>"))
        claims_evil = (
            ("authorization", client_key.headers["Authorization"]),
            ("x-meridian-tenant", "evil"),
        )
        target = upstream.app[GRPC_SERVER].target
        assert await grpc_call(target, claims_evil) == grpc.StatusCode.OK
        assert recorder.tenants == ["acme"]  # the key's tenant, carried over the hop
        # A hop without the secret, and a client straight to B over gRPC: refused.
        unauthenticated = await gateway(parse_config(upstream_config(None), "<test>"))
        target = unauthenticated.app[GRPC_SERVER].target
        assert await grpc_call(target, claims_evil) != grpc.StatusCode.OK
        direct = downstream.app[GRPC_SERVER].target
        tenant_only = (("x-meridian-tenant", "acme"),)
        assert await grpc_call(direct, tenant_only) == grpc.StatusCode.UNAUTHENTICATED
        assert recorder.tenants == ["acme"]
