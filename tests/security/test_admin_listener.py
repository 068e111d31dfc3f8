"""Introspection lives on the admin listener; the public listener answers it like a missing path,
whatever the client sends."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from gateway.admin import ADMIN, admin_only
from gateway.app import build_app, start_gateway
from gateway.config import ConfigError
from tests.gateway.support import FAST_ENGINE, MODEL, config_for
from tests.servers import EmulatorFactory, GatewayFactory, emulators, gateways

ADMIN_PATHS = ("/metrics", "/v1/meridian/state")
SPOOFS: tuple[dict[str, str], ...] = (
    {},
    {"X-Forwarded-For": "127.0.0.1"},
    {"X-Real-IP": "127.0.0.1", "Host": "127.0.0.1"},
    {"X-Meridian-Admin": "true", "Forwarded": "for=127.0.0.1"},
)


@pytest.fixture
async def rig() -> AsyncIterator[tuple[EmulatorFactory, GatewayFactory]]:
    async with emulators(MODEL, FAST_ENGINE) as emulator, gateways() as gateway:
        yield emulator, gateway


async def test_public_listener_hides_introspection_whatever_the_headers(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    assert running.admin_port not in (0, running.port)
    async with aiohttp.ClientSession() as session:
        for path in ADMIN_PATHS:
            for headers in SPOOFS:
                async with session.get(running.url + path, headers=headers) as r:
                    assert r.status == 404, (path, headers)
                    assert (await r.json())["error"]["code"] == "not_found"
            async with session.get(running.admin_url + path) as r:
                assert r.status == 200, path
        async with session.get(running.url + "/readyz") as r:
            assert r.status == 200
            assert await r.json() == {"ready": True}  # no backend names, no state details
        async with session.get(running.admin_url + "/readyz") as r:
            details = await r.json()
            assert details["ready"] is True and details["backends_total"] == 1
        for url in (running.url, running.admin_url):
            async with session.get(url + "/healthz") as r:
                assert r.status == 200


async def test_admin_listener_serves_no_inference(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    async with aiohttp.ClientSession() as session:
        async with session.post(running.admin_url + "/v1/chat/completions", json=body) as r:
            assert r.status == 404
        async with session.post(running.url + "/v1/chat/completions", json=body) as r:
            assert r.status == 200
    assert backend.stats.requests == 1


async def test_public_metrics_is_an_operator_choice(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, gateway = rig
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}, admin={"public_metrics": True}))
    async with aiohttp.ClientSession() as session:
        async with session.get(running.url + "/metrics") as r:
            assert r.status == 200
        async with session.get(running.url + "/v1/meridian/state") as r:
            assert r.status == 404


async def test_a_page_mounted_admin_only_answers_on_the_admin_listener(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    emulator, _ = rig
    backend = await emulator("b1")
    app = build_app(config_for({"b1": backend.url}))

    async def status_page(request: web.Request) -> web.Response:
        return web.Response(text="status")

    app.router.add_get("/status", status_page)
    app.router.add_get("/status/{part}", status_page)
    admin_only(app, "/status")
    runner = web.AppRunner(app)
    await runner.setup()
    public = web.TCPSite(runner, "127.0.0.1", 0)
    admin = web.TCPSite(runner, "127.0.0.1", 0)
    await public.start()
    await admin.start()
    ports = [s._server.sockets[0].getsockname()[1] for s in (public, admin)]  # type: ignore[union-attr]
    app[ADMIN].ports.add(ports[1])
    try:
        async with aiohttp.ClientSession() as session:
            for path in ("/status", "/status/x"):
                async with session.get(f"http://127.0.0.1:{ports[0]}{path}") as r:
                    assert r.status == 404
                async with session.get(f"http://127.0.0.1:{ports[1]}{path}") as r:
                    assert r.status == 200
    finally:
        await runner.cleanup()


async def test_admin_port_cannot_be_the_public_port(
    rig: tuple[EmulatorFactory, GatewayFactory], unused_tcp_port: int
) -> None:
    emulator, _ = rig
    backend = await emulator("b1")
    config = config_for({"b1": backend.url}, admin={"port": unused_tcp_port})
    with pytest.raises(ConfigError, match=r"admin\.port"):
        await start_gateway(config, "127.0.0.1", unused_tcp_port)
