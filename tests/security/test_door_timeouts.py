"""Slow and greedy clients at the HTTP door, over real sockets: a slow head or body gets 408 and
a closed socket, an idle keep-alive connection is closed, connection caps refuse at once — and
/healthz on the admin listener answers throughout. Every wait is for the gateway to close the
socket or for its own counters, never a sleep."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.web_protocol import RequestHandler

from gateway.app import RunningGateway
from gateway.http_socket import protocol
from gateway.http_socket.policy import DOOR
from gateway.http_socket.protocol import DoorServer
from gateway.lean_door.connection import LeanConnection
from gateway.lean_door.door import LeanDoor
from tests.gateway.support import FAST_ENGINE, MODEL
from tests.security.auth_support import until
from tests.security.door_support import Rig, door_gateway, door_timeouts, sample
from tests.servers import emulators, gateways

HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n"


@pytest.fixture(params=[True, False], ids=["lean", "aiohttp"])
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    async with emulators(MODEL, FAST_ENGINE) as emulator, gateways() as gateway:
        yield emulator, gateway, bool(request.param)


async def _open(port: int, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def _healthz(url: str) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/healthz") as r:
            return r.status


async def test_slowloris_heads_get_408_and_a_closed_socket(
    rig: Rig,
) -> None:
    running = await door_gateway(rig, header_timeout_s=0.5)
    port = running.port
    slow = [await _open(port, HEAD + b"X-Slow: 1") for _ in range(20)]  # never finish the head
    assert await _healthz(running.admin_url) == 200
    for reader, writer in slow:
        answer = await reader.read()  # the 408, then EOF: the gateway shut its write side
        assert answer.startswith(b"HTTP/1.1 408 ")
        writer.close()
    assert door_timeouts(running, "headers") == 20
    await until(lambda: running.app[DOOR].total == 0)  # every socket closed after its 408
    assert await _healthz(running.url) == 200


def _connections(running: RunningGateway) -> set[RequestHandler | LeanConnection]:
    """The gateway's open client connections: aiohttp's handlers and the lean door's."""
    server = running.runner.server
    assert isinstance(server, DoorServer)
    lean = server.lean.connections if isinstance(server.lean, LeanDoor) else set()
    return {*server.connections, *lean}


async def _unread_partial_head(
    running: RunningGateway,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection whose partial head sits unread in the gateway's socket when the head
    deadline fires (a slow client's last bytes that came as the timer ran): the gateway stops
    reading this one connection before the bytes are sent."""
    policy = running.app[DOOR]
    before = _connections(running)
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
    await until(lambda: policy.total == 1)
    [handler] = [h for h in _connections(running) if h not in before]
    assert handler.transport is not None
    handler.transport.pause_reading()
    writer.write(HEAD + b"X-Slow: 1")
    await writer.drain()
    return reader, writer


async def test_a_head_left_unread_past_its_deadline_gets_its_408_not_a_reset(
    rig: Rig,
) -> None:
    running = await door_gateway(rig, header_timeout_s=0.5)
    reader, writer = await _unread_partial_head(running)
    # Closing at once with the head unread was a reset here (ConnectionResetError, no 408).
    answer = await reader.read()
    assert answer.startswith(b"HTTP/1.1 408 ") and b'"request_timeout"' in answer
    writer.close()
    await until(lambda: running.app[DOOR].total == 0)  # the client's close ends the linger
    assert door_timeouts(running, "headers") == 1


async def test_the_linger_after_a_408_is_bounded_in_bytes_and_time(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = await door_gateway(rig, header_timeout_s=0.5)
    policy = running.app[DOOR]
    # Bytes: a client that keeps sending after its 408 is cut off after LINGER_BYTES more,
    # long before a linger this long would end it.
    monkeypatch.setattr(protocol, "LINGER_S", 600.0)
    reader, writer = await _open(running.port, HEAD + b"X-Slow: 1")
    assert (await reader.read()).startswith(b"HTTP/1.1 408 ")
    with contextlib.suppress(ConnectionError):
        for _ in range(2 * protocol.LINGER_BYTES // 4096 + 1):
            writer.write(b"x" * 4096)
            await writer.drain()
    await until(lambda: policy.total == 0)
    writer.close()
    # Time: a client that neither sends nor closes is closed after LINGER_S.
    monkeypatch.setattr(protocol, "LINGER_S", 0.2)
    reader, writer = await _open(running.port, HEAD + b"X-Slow: 1")
    assert (await reader.read()).startswith(b"HTTP/1.1 408 ")
    await until(lambda: policy.total == 0)  # the client still holds its end open
    writer.close()
    assert door_timeouts(running, "headers") == 2


async def test_slow_body_gets_408(rig: Rig) -> None:
    running = await door_gateway(rig, body_timeout_s=0.5)
    reader, writer = await _open(
        running.port,
        HEAD + b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model": ',
    )
    answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"\r\nConnection: close\r\n" in answer  # the rest of the body is not waited for
    assert b'"request_timeout"' in answer
    assert door_timeouts(running, "body") == 1


async def test_idle_keepalive_connection_is_closed(
    rig: Rig,
) -> None:
    running = await door_gateway(rig, keepalive_timeout_s=0.5)
    reader, writer = await _open(running.port, b"GET /healthz HTTP/1.1\r\nHost: g\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    await reader.read()  # the body, then EOF once the idle connection is closed
    assert reader.at_eof()
    writer.close()


@pytest.mark.parametrize(
    ("door", "reason"),
    [
        ({"max_connections_per_client": 3, "header_timeout_s": 60}, "per_client"),
        ({"max_connections": 3, "header_timeout_s": 60}, "total"),
    ],
)
async def test_connection_caps_refuse_at_once_while_admin_healthz_answers(
    rig: Rig, door: dict[str, object], reason: str
) -> None:
    running = await door_gateway(rig, **door)
    policy = running.app[DOOR]
    port = running.port
    held = [await _open(port, HEAD) for _ in range(3)]
    await until(lambda: policy.total == 3)
    reader, writer = await _open(port, b"GET /healthz HTTP/1.1\r\nHost: g\r\n\r\n")
    assert await reader.read() == b""  # closed before a byte was read
    writer.close()
    assert sample(running, "meridian_door_connections_refused_total", reason=reason) == 1
    assert await _healthz(running.admin_url) == 200
    held[0][1].close()
    await until(lambda: policy.total == 2)
    assert await _healthz(running.url) == 200
    for _, held_writer in held[1:]:
        held_writer.close()
    await until(lambda: policy.total == 0)
    assert not policy.per_client  # nothing kept per address once its connections are gone
