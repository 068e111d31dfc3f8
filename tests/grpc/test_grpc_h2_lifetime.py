"""A connection's age and idleness on the h2 engine (gateway/grpc_h2/lifetime.py): an old or
idle connection is told to go (GOAWAY, PING, GOAWAY naming its last stream), its calls finish
(or end UNAVAILABLE after the grace), then it closes; a gRPC client reconnects without a call
failing. Seen with a raw HTTP/2 client (the frames) and with grpcio's (what an application
sees)."""

from __future__ import annotations

import grpc
import h2.errors
import h2.events
import pytest

from gateway.config import ConfigError, GatewayConfig, parse_config
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import grpc_server_config
from gateway.grpc_h2.limits import H2Limits, LifetimeLimits
from gateway.grpc_h2.server import H2GrpcServer
from tests.grpc.grpc_support import OWN_CONNECTION, chat
from tests.grpc.h2_client import (
    GatedBackend,
    RawClient,
    call_tasks,
    closes,
    h2_server,
    queue_chat,
    send_chat,
    token,
)
from tests.servers import settle

ANY_STREAM = 2**31 - 1
UNAVAILABLE = str(grpc.StatusCode.UNAVAILABLE.value[0]).encode()


def _limits(**bounds: float) -> H2Limits:
    return H2Limits(lifetime=LifetimeLimits(**bounds))


def _goaways(client: RawClient) -> list[int]:
    """The last stream ids of the GOAWAYs the client got, in order."""
    return [
        int(e.last_stream_id or 0)
        for e in client.events
        if isinstance(e, h2.events.ConnectionTerminated)
        and e.error_code == h2.errors.ErrorCodes.NO_ERROR
    ]


async def _closed_by_server(client: RawClient, engine: H2GrpcServer) -> None:
    await client.until_closed()
    await settle(lambda: not engine.connections and engine.active_calls() == 0)
    await settle(lambda: not call_tasks())
    await client.close()


async def _connected_with_a_call(port: int) -> RawClient:
    """A client whose call (stream 1) goes in the write of its preface, so the server reads it
    before any answer to its PING, however late a 0.05 s age comes to the server's loop (a
    client reading the PING during its handshake would leave nothing to finish: closed)."""
    client = await RawClient.start(port)
    queue_chat(client, 1)
    await client.handshake()
    return client


async def test_an_old_connection_is_told_to_go_and_its_call_finishes_first() -> None:
    backend = GatedBackend(token("Hello"), token(" world"))
    async with h2_server(backend, _limits(max_age_s=0.05)) as (running, engine):
        client = await _connected_with_a_call(running.port)
        await client.until(lambda: _goaways(client) == [ANY_STREAM, 1])
        # Both GOAWAYs are in, the call is still running, and it runs to its end.
        assert engine.active_calls() == 1
        assert not client.seen(h2.events.StreamEnded, 1)
        backend.gate.set()
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        trailers = client.header_blocks(1)[-1]
        assert trailers[b"grpc-status"] == b"0", trailers
        assert b" world" in client.data(1)
        await _closed_by_server(client, engine)
        assert closes(engine) == ["max_age"]


async def test_a_stream_after_the_last_one_named_is_refused() -> None:
    """A client that opened a stream before it read the second GOAWAY gets REFUSED_STREAM for
    it (nothing of it ran: a gRPC client retries it on a new connection)."""
    backend = GatedBackend(token("Hello"), token(" world"))
    async with h2_server(backend, _limits(max_age_s=0.05)) as (running, engine):
        client = await _connected_with_a_call(running.port)
        await client.until(lambda: _goaways(client) == [ANY_STREAM, 1])
        await send_chat(client, 3)  # as if it crossed the second GOAWAY on the wire
        await client.until(lambda: client.seen(h2.events.StreamReset, 3))
        reset = next(e for e in client.events if isinstance(e, h2.events.StreamReset))
        assert reset.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
        assert len(backend.requests) == 1
        backend.gate.set()
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        await _closed_by_server(client, engine)


async def test_calls_left_after_the_grace_end_unavailable_with_their_upstreams() -> None:
    backend = GatedBackend(token("Hello"), token(" world"))  # never released
    limits = _limits(max_age_s=0.05, age_grace_s=0.05)
    async with h2_server(backend, limits) as (running, engine):
        client = await _connected_with_a_call(running.port)
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        assert client.header_blocks(1)[-1][b"grpc-status"] == UNAVAILABLE
        assert _goaways(client) == [ANY_STREAM, 1]
        await _closed_by_server(client, engine)
        assert backend.closed
        assert closes(engine) == ["max_age"]


async def test_an_idle_connection_goes_and_a_busy_one_stays() -> None:
    backend = GatedBackend(token("Hello"), token(" world"))
    async with h2_server(backend, _limits(max_idle_s=0.05)) as (running, engine):
        busy = await RawClient.start(running.port)
        queue_chat(busy, 1)
        await busy.handshake()  # its call came with its preface: it was never idle
        await busy.until(lambda: busy.seen(h2.events.DataReceived, 1))
        idle = await RawClient.connect(running.port)
        await idle.until(lambda: _goaways(idle) == [ANY_STREAM, 0])
        await _closed_by_server_keeping(idle, engine, kept=1)
        # The busy one's idle timer stopped with its call: an answered PING shows nothing
        # came before it.
        busy.h2.ping(b"still-in")
        busy.flush()
        await busy.until(lambda: busy.seen(h2.events.PingAckReceived))
        assert _goaways(busy) == []
        # Once its call ends it is idle too, and goes.
        backend.gate.set()
        await busy.until(lambda: busy.seen(h2.events.StreamEnded, 1))
        await busy.until(lambda: _goaways(busy) == [ANY_STREAM, 1])
        await _closed_by_server(busy, engine)
        assert closes(engine) == ["max_idle", "max_idle"]


async def _closed_by_server_keeping(client: RawClient, engine: H2GrpcServer, kept: int) -> None:
    await client.until_closed()
    await settle(lambda: len(engine.connections) == kept)
    await client.close()


@pytest.mark.parametrize("max_age_s", [0.05, 0.0001])
async def test_a_grpc_client_moves_to_new_connections_without_a_failed_call(
    max_age_s: float,
) -> None:
    """grpcio's channel takes the GOAWAYs as they come, mid-call or between calls: every call
    succeeds while the connections under them are replaced (the engine closing each as drained).
    An age of 0.1 ms ends each connection as soon as it may: the age counts from the handshake,
    since grpcio aborted its whole process (a failed check in grpc-core's memory quota) on a
    GOAWAY that came right after the server's SETTINGS."""
    backend = GatedBackend(token("Hello"), token(" world"))
    backend.gate.set()
    async with h2_server(backend, _limits(max_age_s=max_age_s)) as (running, engine):
        async with grpc.aio.insecure_channel(running.target, options=OWN_CONNECTION) as channel:
            stub = inference_stub(channel)
            for _ in range(2_000):  # bounded: ends long before on any host
                chunks = [chunk async for chunk in stub.ChatCompletion(chat())]
                assert len(chunks) >= 2
                if closes(engine).count("max_age") >= 2:
                    break
        assert closes(engine).count("max_age") >= 2, closes(engine)


def _listen(**connections: float) -> GatewayConfig:
    return parse_config(
        {
            "listen": {"grpc_port": 0, "grpc_connections": connections},
            "backends": [
                {"name": "b1", "region": "local", "url": "http://127.0.0.1:9/v1", "models": ["m"]}
            ],
        }
    )


def test_the_bounds_reach_both_engines_from_the_config() -> None:
    server = grpc_server_config(_listen(max_age_s=30, max_age_grace_s=5, max_idle_s=60))
    assert server is not None
    assert server.h2_limits().lifetime == LifetimeLimits(30, 5, 60)
    options = dict(server.channel_options())
    assert options["grpc.max_connection_age_ms"] == 30_000
    assert options["grpc.max_connection_age_grace_ms"] == 5_000
    assert options["grpc.max_connection_idle_ms"] == 60_000
    default = grpc_server_config(_listen())
    assert default is not None
    assert default.lifetime == LifetimeLimits(max_age_s=600.0)
    assert "grpc.max_connection_idle_ms" not in dict(default.channel_options())
    with pytest.raises(ConfigError, match="max_age_s"):
        _listen(max_age_s=0)
