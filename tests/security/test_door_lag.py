"""A client's deadline that passes while the gateway's own event loop is too busy to look is not
the client's fault: a head, a body, a keep-alive connection's next request, a gRPC client's
preface, a slow reader that took its bytes or a gRPC client that opened its window, all in time,
are served, not answered 408, cut off or reset. The loop is held (a blocking call on its thread)
past the deadline with the client's bytes in the kernel, as one turn of a burst of thousands of
new streams holds it.

Each test runs on a uvloop of its own, as ``meridian serve`` does. Both uvloop (0.23 checked)
and asyncio's own loop poll the sockets before they run the timers that came due meanwhile, so a
deadline kept by a plain timer callback (the head's, keep-alive's, the gRPC preface's) sees the
bytes first and passes as it is. A deadline around a *wait* does not: the read wakes the waiting
task only in the next turn, and the timer, run in this one, cancels it first. The body read, the
SSE writer's wait for a slow client and a gRPC call's wait for room in the client's window
failed here that way (408, a stream cut off, a call reset CANCEL) until they took
gateway/lag_timeout.py's ``LagForgivingTimeout`` and ``ForgivingTimer``. That a client who
really is slow still gets its 408 is tests/security/test_door_timeouts.py's to show."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable

import h2.events
import orjson
import pytest
import uvloop

from gateway.app import RunningGateway
from gateway.grpc_h2.limits import H2Limits
from gateway.http_socket.policy import DOOR
from gateway.http_socket.protocol import DoorRequestHandler, DoorServer
from gateway.lean_door.door import LeanDoor
from tests.gateway.support import FAST_ENGINE, MODEL, config_for
from tests.grpc.h2_client import GatedBackend, RawClient, closes, h2_server, send_chat, token
from tests.held_loop import hold_until
from tests.security.auth_support import until
from tests.security.door_support import Rig, door_gateway, door_timeouts
from tests.servers import (
    emulators,
    gateways,
    hang_bound,
    post_bytes,
)

DEADLINE_S = 1.0
HELD_PAST_S = 0.5  # the hold ends this long after the deadline: over LATE_S late, surely
BODY = orjson.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
)
CHAT_PATH = "/v1/chat/completions"


LEAN = pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])


def _on_uvloop(test: Callable[[Rig], Awaitable[None]], lean: bool) -> None:
    """Run ``test`` on a new uvloop with an emulator and gateway factory of its own."""

    async def run() -> None:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        async with emulators(MODEL, FAST_ENGINE) as emulator, gateways() as gateway:
            await test((emulator, gateway, lean))

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run())


def _lean_door(running: RunningGateway) -> LeanDoor:
    server = running.runner.server
    assert isinstance(server, DoorServer) and isinstance(server.lean, LeanDoor)
    return server.lean


def _hold_past(deadline_from: float) -> None:
    """Hold the loop (this test runs on its thread) until the deadline armed at
    ``deadline_from`` (``time.monotonic()``) has passed by ``HELD_PAST_S``."""
    hold_until(deadline_from + DEADLINE_S + HELD_PAST_S)


async def _answer(sock: socket.socket) -> bytes:
    """Everything the gateway sends on ``sock`` until it closes (the request said close)."""
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        async with asyncio.timeout(hang_bound(10.0)):
            return await reader.read()
    finally:
        writer.close()


@LEAN
def test_a_head_that_came_while_the_loop_was_busy_is_served_not_408(lean: bool) -> None:
    _on_uvloop(_head_in_time, lean)


async def _head_in_time(rig: Rig) -> None:
    running = await door_gateway(rig, header_timeout_s=DEADLINE_S)
    sock = socket.create_connection(("127.0.0.1", running.port))
    await until(lambda: running.app[DOOR].total == 1)  # accepted: the head's deadline runs
    armed = time.monotonic()
    sock.sendall(post_bytes("gateway", CHAT_PATH, BODY, close=True))  # all of it, in time
    _hold_past(armed)
    answer = await _answer(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert door_timeouts(running, "headers") == 0


@LEAN
def test_a_body_that_came_while_the_loop_was_busy_is_served_not_408(lean: bool) -> None:
    _on_uvloop(_body_in_time, lean)


def _reading_body(running: RunningGateway) -> bool:
    """Whether a connection of the door waits for a request's body (its deadline is armed)."""
    server = running.runner.server
    if isinstance(server, DoorServer) and isinstance(server.lean, LeanDoor):
        return any(c.reading_body for c in server.lean.connections)
    assert server is not None
    return any(isinstance(c, DoorRequestHandler) and c.reading_body for c in server.connections)


async def _body_in_time(rig: Rig) -> None:
    running = await door_gateway(rig, body_timeout_s=DEADLINE_S)
    request = post_bytes("gateway", CHAT_PATH, BODY, close=True)
    sock = socket.create_connection(("127.0.0.1", running.port))
    sock.sendall(request[:-10])  # the head and most of the body
    await until(lambda: _reading_body(running))
    armed = time.monotonic()
    sock.sendall(request[-10:])
    _hold_past(armed)
    answer = await _answer(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert door_timeouts(running, "body") == 0


def test_a_keepalive_request_that_came_while_the_loop_was_busy_is_served() -> None:
    """The lean door's keep-alive deadline (aiohttp's server runs its own)."""
    _on_uvloop(_next_request_in_time, lean=True)


async def _next_request_in_time(rig: Rig) -> None:
    running = await door_gateway(rig, keepalive_timeout_s=DEADLINE_S)
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
    writer.write(post_bytes("gateway", CHAT_PATH, BODY))
    async with asyncio.timeout(hang_bound(10.0)):
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), head
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
    # The whole answer is here: the door armed keep-alive's deadline as it wrote the last byte.
    armed = time.monotonic()
    writer.write(post_bytes("gateway", CHAT_PATH, BODY, close=True))  # the next, in time
    _hold_past(armed)
    async with asyncio.timeout(hang_bound(10.0)):
        answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_a_client_that_read_while_the_loop_was_busy_is_not_too_slow() -> None:
    """An SSE stream waits for a slow client to take what it was sent (``write_timeout_s``);
    the client reads it all while the loop is held past that deadline."""
    _on_uvloop(_client_reads_in_time, lean=True)


async def _client_reads_in_time(rig: Rig) -> None:
    # Small buffers at both ends: the stream waits for the client after a few events.
    streams = {"buffer_bytes": 16_384, "send_buffer_bytes": 4096, "write_timeout_s": DEADLINE_S}
    emulator, gateway, _ = rig
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}, streams=streams))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", running.port))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    sock.sendall(
        post_bytes("gateway", CHAT_PATH, orjson.dumps({**body, "max_tokens": 600}), close=True)
    )
    door = _lean_door(running)
    await until(lambda: any(c.waiting_to_write for c in door.connections))
    armed = time.monotonic()
    sock.settimeout(0.05)
    start = b""
    while time.monotonic() < armed + DEADLINE_S + HELD_PAST_S:  # the loop held
        with contextlib.suppress(TimeoutError):
            start += sock.recv(65_536)  # what the kernels hold, taken in time
    sock.setblocking(True)
    rest = await _answer(sock)
    assert start.startswith(b"HTTP/1.1 200 ")
    assert rest.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), rest[-200:]  # the whole stream


def test_a_grpc_preface_that_came_while_the_loop_was_busy_is_no_silent_client() -> None:
    _on_uvloop(_preface_in_time, lean=True)


async def _preface_in_time(_: Rig) -> None:
    limits = H2Limits(handshake_timeout_s=DEADLINE_S)
    async with h2_server(GatedBackend(token("x")), limits) as (running, engine):
        client = await RawClient.start(running.port)
        await until(lambda: len(engine.connections) == 1)  # accepted: the preface's deadline
        armed = time.monotonic()
        client.flush()  # the preface and SETTINGS, in time
        _hold_past(armed)
        await client.handshake()
        assert closes(engine) == [] and len(engine.connections) == 1
        await client.close()


def test_a_grpc_window_opened_while_the_loop_was_busy_is_no_stalled_client() -> None:
    """A response blocked by the client's flow-control window waits ``write_stall_timeout_s``
    for room; the client opens the window in time, while the loop is held past it."""
    _on_uvloop(_window_in_time, lean=True)


async def _window_in_time(_: Rig) -> None:
    backend = GatedBackend(token("Hello"), token("x" * 2000))
    limits = H2Limits(write_stall_timeout_s=DEADLINE_S)
    async with h2_server(backend, limits) as (running, engine):
        client = await RawClient.connect(running.port, initial_window=100)
        client.acknowledge = False  # the window stays shut until the test opens it
        await send_chat(client)
        await client.until(lambda: client.seen(h2.events.DataReceived, 1))
        backend.gate.set()  # the next message does not fit the 100-byte window
        await until(
            lambda: any(call.waiting for c in engine.connections for call in c.calls.values())
        )
        armed = time.monotonic()
        client.h2.increment_flow_control_window(1 << 20, stream_id=1)
        client.h2.increment_flow_control_window(1 << 20)
        client.flush()  # room for the rest, in time
        _hold_past(armed)
        ended = (h2.events.StreamEnded, h2.events.StreamReset)
        await client.until(lambda: any(client.seen(kind, 1) for kind in ended))
        assert not client.seen(h2.events.StreamReset, 1)  # CANCEL: "the client stopped reading"
        assert client.header_blocks(1)[-1][b"grpc-status"] == b"0"
        await client.close()
