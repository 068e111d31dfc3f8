"""The lean door on a real gateway over loopback: which requests it serves itself, which it
hands to aiohttp's server (with the bytes read so far), and that a connection keeps working
across the hand-over. Synchronised on the door's own counters, never on time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest

from gateway.app import RunningGateway, build_app
from gateway.http_socket.protocol import DoorServer
from gateway.lean_door.routes import LEAN_ROUTES
from gateway.state_keys import METRICS
from tests.gateway.support import FAST_ENGINE, MODEL, config_for
from tests.security.auth_support import issue
from tests.servers import EmulatorFactory, GatewayFactory, emulators, gateways

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


@pytest.fixture
async def rig() -> AsyncIterator[tuple[EmulatorFactory, GatewayFactory]]:
    async with emulators(MODEL, FAST_ENGINE) as emulator, gateways() as gateway:
        yield emulator, gateway


async def _gateway(
    rig: tuple[EmulatorFactory, GatewayFactory], **overrides: object
) -> RunningGateway:
    emulator, gateway = rig
    backend = await emulator("b1")
    return await gateway(config_for({"b1": backend.url}, **overrides))


def _handed_over(running: RunningGateway, reason: str) -> float:
    registry = running.app[METRICS].registry
    value = registry.get_sample_value("meridian_door_handovers_total", {"reason": reason})
    return value or 0.0


def _lean_served(running: RunningGateway) -> float:
    registry = running.app[METRICS].registry
    return registry.get_sample_value("meridian_door_lean_requests_total") or 0.0


def test_every_lean_route_is_a_post_route_of_the_app() -> None:
    app = build_app(config_for({"b1": "http://127.0.0.1:9"}))
    posts = {
        route.resource.canonical
        for route in app.router.routes()
        if route.method == "POST" and route.resource is not None
    }
    assert set(LEAN_ROUTES) <= posts


async def test_one_connection_moves_from_the_lean_door_to_aiohttp_and_keeps_serving(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    running = await _gateway(rig)
    connector = aiohttp.TCPConnector(limit=1)  # every request on one keep-alive connection
    async with aiohttp.ClientSession(connector=connector) as session:
        url = running.url + "/v1/chat/completions"
        async with session.post(url, json={**CHAT, "stream": True}) as response:
            assert response.status == 200
            body = await response.read()
        assert body.rstrip().endswith(b"data: [DONE]")
        assert _lean_served(running) == 1 and _handed_over(running, "route") == 0
        async with session.post(url, json=CHAT) as response:  # the same connection, reused
            assert response.status == 200
            assert (await response.json())["choices"][0]["message"]["content"]
        assert _lean_served(running) == 2
        async with session.get(running.url + "/v1/models") as response:  # aiohttp's from here
            assert response.status == 200
        assert _handed_over(running, "route") == 1
        async with session.post(url, json={**CHAT, "stream": True}) as response:
            assert response.status == 200
            assert (await response.read()).rstrip().endswith(b"data: [DONE]")
        assert _lean_served(running) == 2  # aiohttp served it, on the connection handed over
    assert connector.closed


async def test_the_openai_sdk_streams_through_the_lean_door(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    running = await _gateway(rig)
    client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0)
    try:
        for _ in range(3):
            stream = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
            )
            text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])
            assert text
    finally:
        await client.close()
    assert _lean_served(running) == 3
    assert _handed_over(running, "route") == 0 and _handed_over(running, "request") == 0


async def test_a_chunked_body_is_served_by_aiohttp(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    running = await _gateway(rig)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"model": "' + MODEL.encode() + b'", '
        yield b'"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'

    async with aiohttp.ClientSession() as session:
        url = running.url + "/v1/chat/completions"
        async with session.post(url, data=chunks()) as response:  # Transfer-Encoding: chunked
            assert response.status == 200
            assert (await response.json())["choices"][0]["message"]["content"]
    assert _handed_over(running, "request") == 1
    assert _lean_served(running) == 0


async def test_a_bad_key_gets_the_auth_gates_401_from_the_lean_door(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    good, wrong = issue("acme"), issue("acme")
    running = await _gateway(rig, auth={"mode": "keys", "keys": [good.entry]})
    async with aiohttp.ClientSession() as session:
        url = running.url + "/v1/chat/completions"
        async with session.post(url, json=CHAT, headers=wrong.headers) as response:
            assert response.status == 401
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
            body = await response.text()
            assert wrong.key not in body and "Traceback" not in body
        async with session.post(url, json=CHAT, headers=good.headers) as response:
            assert response.status == 200
    assert _lean_served(running) == 2 and _handed_over(running, "route") == 0


async def test_door_lean_false_serves_every_request_through_aiohttp(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    running = await _gateway(rig, door={"lean": False})
    server = running.runner.server
    assert isinstance(server, DoorServer) and server.lean is None
    async with aiohttp.ClientSession() as session:
        url = running.url + "/v1/chat/completions"
        async with session.post(url, json={**CHAT, "stream": True}) as response:
            assert response.status == 200
            assert (await response.read()).rstrip().endswith(b"data: [DONE]")
    assert _lean_served(running) == 0
