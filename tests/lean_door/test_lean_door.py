"""The lean door on a real gateway over loopback: which requests it serves itself, which it
hands to aiohttp's server (with the bytes read so far), and that a connection keeps working
across the hand-over. Synchronised on the door's own counters, never on time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import openai
import orjson
import pytest

from gateway.app import RunningGateway, build_app
from gateway.http_socket.policy import DOOR
from gateway.http_socket.protocol import DoorServer
from gateway.lean_door.routes import LEAN_ROUTES
from gateway.reload import _keep_restart_only
from gateway.state_keys import METRICS
from tests.gateway.support import FAST_ENGINE, MODEL, config_for
from tests.security.auth_support import issue, until
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


async def _exchange(port: int, data: bytes, *pieces: bytes) -> bytes:
    """Send ``data`` (then each of ``pieces`` once the one before went out); every byte the
    gateway answers until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for part in (data, *pieces):
            writer.write(part)
            await writer.drain()
        return await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()


def _post(path: str, body: bytes, *headers: str, version: str = "1.1") -> bytes:
    lines = [f"POST {path} HTTP/{version}", "Host: gateway", f"Content-Length: {len(body)}"]
    lines += headers
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def test_a_body_in_pieces_and_a_pipelined_request_of_another_route(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    running = await _gateway(rig)
    body = orjson.dumps(CHAT)
    request = _post("/v1/chat/completions", body)
    head, rest = request[: -len(body)], request[-len(body) :]
    models = b"GET /v1/models HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n"
    # The head alone, the body in two reads with the next request (another route) behind it.
    answer = await _exchange(running.port, head, rest[:7], rest[7:] + models)
    first, second = answer.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200 ") and b'"chat.completion"' in first
    assert second.startswith(b"200 ") and b'"object":"list"' in second
    assert _lean_served(running) == 1 and _handed_over(running, "route") == 1


@pytest.mark.parametrize(
    ("extra", "version", "status"),
    [
        (("Content-Encoding: identity",), "1.1", 200),  # aiohttp decodes a coded body
        ((), "1.0", 200),
        (("X-Long: " + "x" * 9000,), "1.1", 400),  # past aiohttp's line limit: its refusal
        (tuple(f"X-{n}: 1" for n in range(129)), "1.1", 400),  # past its 128 headers
    ],
    ids=["content-encoding", "http-1.0", "long-header", "many-headers"],
)
async def test_unusual_requests_are_aiohttps_to_answer(
    rig: tuple[EmulatorFactory, GatewayFactory],
    extra: tuple[str, ...],
    version: str,
    status: int,
) -> None:
    running = await _gateway(rig)
    request = _post("/v1/chat/completions", orjson.dumps(CHAT), *extra, "Connection: close")
    answer = await _exchange(
        running.port, request.replace(b"HTTP/1.1", f"HTTP/{version}".encode(), 1)
    )
    assert int(answer.split(b" ", 2)[1]) == status
    assert b"Server: Python" in answer  # aiohttp's own header: aiohttp answered
    assert _handed_over(running, "request") == 1 and _lean_served(running) == 0


async def test_a_refusal_before_a_body_that_never_comes_closes_the_connection(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    good = issue("acme")
    running = await _gateway(rig, auth={"mode": "keys", "keys": [good.entry]})
    head = _post("/v1/chat/completions", b"", "Authorization: Bearer wrong")
    head = head.replace(b"Content-Length: 0", b"Content-Length: 1000")
    answer = await _exchange(running.port, head + b'{"model": ')  # 990 bytes never sent
    assert answer.startswith(b"HTTP/1.1 401 ") and b"Connection: close\r\n" in answer
    assert answer.count(b"HTTP/1.1") == 1  # and the EOF: the rest is not read as a request
    await until(lambda: running.app[DOOR].total == 0)


def test_a_reload_keeps_the_running_door_and_takes_its_timeouts() -> None:
    urls = {"b1": "http://127.0.0.1:9"}
    running = config_for(urls, door={"lean": True, "body_timeout_s": 30})
    reloaded = _keep_restart_only(
        running, config_for(urls, door={"lean": False, "body_timeout_s": 5})
    )
    assert reloaded.door.lean is True  # the listener's protocol was chosen when it started
    assert reloaded.door.body_timeout_s == 5  # read per request, by both doors
