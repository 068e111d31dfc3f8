"""The h2 engine's flood bounds (gateway/grpc_h2/flood.py), seen with a raw HTTP/2 client: a
client that makes the server work without asking for anything (PINGs, SETTINGS, streams it
resets at once) gets GOAWAY ENHANCE_YOUR_CALM and is disconnected, with nothing left running;
a client that does the same things at the pace of real use keeps its connection."""

from __future__ import annotations

import contextlib
import dataclasses

import h2.errors
import h2.events
import h2.settings

from gateway.grpc_h2.flood import FloodLimits
from gateway.grpc_h2.limits import H2Limits
from gateway.grpc_h2.server import H2GrpcServer
from tests.grpc.h2_client import (
    GatedBackend,
    RawClient,
    call_tasks,
    closes,
    h2_server,
    request_headers,
    send_chat,
    token,
)
from tests.servers import settle

CALM = h2.errors.ErrorCodes.ENHANCE_YOUR_CALM


def _limits(**flood: float) -> H2Limits:
    return H2Limits(flood=dataclasses.replace(FloodLimits(), **flood))  # type: ignore[arg-type]


def _goaway(client: RawClient) -> h2.events.ConnectionTerminated | None:
    ends = [e for e in client.events if isinstance(e, h2.events.ConnectionTerminated)]
    return ends[0] if ends else None


async def _calmed(client: RawClient, engine: H2GrpcServer, reason: bytes) -> None:
    """The client got GOAWAY ENHANCE_YOUR_CALM for ``reason``; the connection and its calls are
    gone from the server."""
    with contextlib.suppress(ConnectionError):  # the server closes right after its GOAWAY
        await client.until(lambda: _goaway(client) is not None)
    goaway = _goaway(client)
    assert goaway is not None, client.events
    assert (goaway.error_code, goaway.additional_data) == (CALM, reason)
    assert closes(engine) == [reason.decode()]  # what meridian_grpc_connections_closed counts
    await settle(lambda: not engine.connections and engine.active_calls() == 0)
    await settle(lambda: not call_tasks())
    await client.close()


async def test_pings_with_nothing_sent_between_them_are_struck_out() -> None:
    async with h2_server(GatedBackend(token("x"))) as (running, engine):
        client = await RawClient.connect(running.port)
        for n in range(4):  # the first sets the clock; then strikes 1, 2 and 3 (> 2)
            client.h2.ping(b"flood-%02d" % n)
        client.flush()
        await _calmed(client, engine, b"too_many_pings")


async def test_pings_between_the_servers_messages_are_never_strikes() -> None:
    backend = GatedBackend(token("Hello"), token(" world"))
    backend.gate.set()
    async with h2_server(backend) as (running, engine):
        client = await RawClient.connect(running.port)
        for stream_id in (1, 3, 5, 7, 9):  # a call, then a PING: as a gRPC client's BDP pings
            await _whole_call(client, stream_id)
            await _answered_ping(client, answers=(stream_id + 1) // 2)
        assert _goaway(client) is None
        assert len(engine.connections) == 1
        await client.close()


async def test_a_settings_flood_is_cut_off() -> None:
    limits = _limits(settings_burst=4, settings_refill_s=3600.0)
    async with h2_server(GatedBackend(token("x")), limits) as (running, engine):
        client = await RawClient.connect(running.port)  # its first SETTINGS took one
        for window in range(65_536, 65_536 + 6):
            client.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        client.flush()
        await _calmed(client, engine, b"too_many_settings")


async def test_streams_reset_as_they_open_close_the_connection_and_leave_nothing() -> None:
    backend = GatedBackend(token("Hello"))
    async with h2_server(backend, _limits(reset_check_streams=10)) as (running, engine):
        client = await RawClient.connect(running.port)
        for stream_id in range(1, 21, 2):  # HEADERS then RST_STREAM, ten times in one write
            client.h2.send_headers(stream_id, request_headers())
            client.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        client.flush()
        await _calmed(client, engine, b"too_many_resets")


async def test_a_client_that_cancels_some_of_its_calls_keeps_its_connection() -> None:
    backend = GatedBackend(token("Hello"), token(" world"))
    backend.gate.set()
    async with h2_server(backend, _limits(reset_check_streams=10)) as (running, engine):
        client = await RawClient.connect(running.port)
        for stream_id in range(1, 31, 2):  # 15 calls: every third one cancelled at once
            if stream_id % 3 == 0:
                client.h2.send_headers(stream_id, request_headers())
                client.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                client.flush()
                continue
            await _whole_call(client, stream_id)
        assert _goaway(client) is None
        assert len(engine.connections) == 1
        await client.close()


async def _whole_call(client: RawClient, stream_id: int) -> None:
    await send_chat(client, stream_id)
    await client.until(lambda: client.seen(h2.events.StreamEnded, stream_id))


async def _answered_ping(client: RawClient, answers: int) -> None:
    client.h2.ping(b"ping-%03d" % answers)
    client.flush()
    await client.until(
        lambda: sum(isinstance(e, h2.events.PingAckReceived) for e in client.events) == answers
    )
