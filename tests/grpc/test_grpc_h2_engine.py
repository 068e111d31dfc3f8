"""What only the h2 engine (gateway/grpc_h2) can be asked, seen with a raw HTTP/2 client: the
frames and writes it sends, and how it treats clients that reset, stall or never send."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

import grpc
import h2.errors
import h2.events
import h2.settings
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.grpc_h2.limits import H2Limits
from gateway.lifecycle.seam import BackendEvent, BackendRequest, StreamOpened
from proto.meridian.v1 import inference_pb2 as pb
from tests.grpc.grpc_support import chat
from tests.grpc.h2_client import (
    GatedBackend,
    RawClient,
    call_tasks,
    grpc_frame,
    h2_server,
    request_headers,
    send_chat,
    token,
)
from tests.servers import settle


async def test_headers_and_the_first_message_leave_in_one_write() -> None:
    backend = GatedBackend(token("Hello"), token(" world"))
    async with h2_server(backend) as (running, engine):
        client = await RawClient.connect(running.port)
        writes_before = engine.transport_writes
        await send_chat(client)
        await client.until(lambda: client.seen(h2.events.DataReceived, 1))
        # The backend is held at its gate: nothing else of this call is due yet.
        assert engine.transport_writes - writes_before == 1
        assert client.seen(h2.events.ResponseReceived, 1)
        (initial,) = client.header_blocks(1)
        assert initial[b"x-meridian-route"] == b"backend=scripted"
        backend.gate.set()
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        trailers = client.header_blocks(1)[-1]
        assert trailers[b"grpc-status"] == b"0"
        raw = client.data(1)
        first = pb.ChatCompletionChunk.FromString(raw[5 : 5 + int.from_bytes(raw[1:5])])
        assert first.choices[0].delta.content == "Hello"
        await client.close()


async def test_a_call_is_timed_from_its_headers_not_from_its_message() -> None:
    # The servicer starts once the request message is in; the call arrived with its HEADERS,
    # and its timing entries and deadline count from then (as the HTTP door counts a body).
    backend = GatedBackend(token("Hello"))
    async with h2_server(backend) as (running, engine):
        client = await RawClient.connect(running.port)
        client.h2.send_headers(1, request_headers())
        client.flush()
        await settle(lambda: engine.active_calls() == 1)  # the server has read the HEADERS
        message_sent_at = time.perf_counter()
        client.h2.send_data(1, grpc_frame(chat(max_tokens=5).SerializeToString()), end_stream=True)
        client.flush()
        await client.until(lambda: client.seen(h2.events.DataReceived, 1))
        (request,) = backend.requests
        assert request.received_at < message_sent_at
        backend.gate.set()
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        await client.close()


async def test_a_reset_stream_closes_the_backend_and_leaves_no_task() -> None:
    backend = GatedBackend(token("Hello"), token(" world"))
    async with h2_server(backend) as (running, engine):
        client = await RawClient.connect(running.port)
        await send_chat(client)
        await client.until(lambda: client.seen(h2.events.DataReceived, 1))
        client.h2.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
        client.flush()
        await settle(lambda: backend.closed and engine.active_calls() == 0)
        await settle(lambda: not call_tasks())
        await client.close()


async def test_a_client_that_stops_reading_is_reset_and_its_backend_closed() -> None:
    backend = GatedBackend(token("Hello"), token("x" * 2000))
    stall = H2Limits(write_stall_timeout_s=0.2)
    async with h2_server(backend, stall) as (running, _):
        client = await RawClient.connect(running.port, initial_window=100)
        client.acknowledge = False  # the window never reopens
        await send_chat(client)
        await client.until(lambda: client.seen(h2.events.DataReceived, 1))
        backend.gate.set()  # the next message does not fit the 100-byte window
        await client.until(lambda: client.seen(h2.events.StreamReset, 1))
        (reset,) = [e for e in client.events if isinstance(e, h2.events.StreamReset)]
        assert reset.error_code == h2.errors.ErrorCodes.CANCEL
        assert len(client.data(1)) <= 100  # never past the window it was given
        await settle(lambda: backend.closed and not call_tasks())
        await client.close()


async def test_a_small_window_is_respected_and_the_stream_completes() -> None:
    tokens = [token(f"token-{i}-" + "y" * 150) for i in range(6)]
    backend = GatedBackend(*tokens)
    backend.gate.set()
    async with h2_server(backend) as (running, _):
        # The h2 client itself raises FlowControlError if the server overruns its window.
        client = await RawClient.connect(running.port, initial_window=64)
        await send_chat(client)
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        raw, messages = client.data(1), []
        while raw:
            size = int.from_bytes(raw[1:5])
            messages.append(pb.ChatCompletionChunk.FromString(raw[5 : 5 + size]))
            raw = raw[5 + size :]
        assert [m.choices[0].delta.content for m in messages] == [
            t["choices"][0]["delta"]["content"] for t in tokens
        ]
        assert client.header_blocks(1)[-1][b"grpc-status"] == b"0"
        await client.close()


async def test_a_request_that_never_comes_ends_cancelled_trailers_only() -> None:
    backend = GatedBackend(token("Hello"))
    async with h2_server(backend, H2Limits(read_timeout_s=0.2)) as (running, engine):
        client = await RawClient.connect(running.port)
        client.h2.send_headers(1, request_headers())  # and then no message, no END_STREAM
        client.flush()
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        (only,) = client.header_blocks(1)  # one block: status and all (trailers-only)
        assert only[b":status"] == b"200" and only[b"grpc-status"] == b"1"
        assert b"no request message" in only[b"grpc-message"]
        await client.until(lambda: client.seen(h2.events.StreamReset, 1))  # stop sending
        assert not backend.started.is_set()
        assert engine.active_calls() == 0
        await client.close()


async def test_the_servers_own_deadline_ends_the_call_and_closes_the_backend() -> None:
    backend = GatedBackend(token("Hello"))
    async with h2_server(backend) as (running, _):
        client = await RawClient.connect(running.port)
        await send_chat(client, 1, (b"grpc-timeout", b"200m"))
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        assert client.header_blocks(1)[-1][b"grpc-status"] == b"4"  # DEADLINE_EXCEEDED
        await settle(lambda: backend.closed and not call_tasks())
        await client.close()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        (request_headers(b"/no.such.Service/Method"), b"12"),  # UNIMPLEMENTED
        ([(k, b"GET" if k == b":method" else v) for k, v in request_headers()], b"12"),
        (
            request_headers(b"/meridian.v1.Inference/ChatCompletion", (b"grpc-timeout", b"soon")),
            b"3",
        ),
    ],
    ids=["unknown-method", "not-grpc", "bad-timeout"],
)
async def test_refused_calls_are_trailers_only(headers: list[Any], status: bytes) -> None:
    async with h2_server(GatedBackend(token("x"))) as (running, _):
        client = await RawClient.connect(running.port)
        client.h2.send_headers(1, headers, end_stream=True)
        client.flush()
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        (only,) = client.header_blocks(1)
        assert only[b"grpc-status"] == status
        await client.close()


async def test_unknown_method_with_the_grpcio_client() -> None:
    async with (
        h2_server(GatedBackend(token("x"))) as (running, _),
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        method = channel.unary_unary("/no.such.Service/Method")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await method(b"", timeout=10)
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED


async def test_health_watch_streams_the_status_change_on_drain() -> None:
    async with (
        h2_server(GatedBackend(token("x"))) as (running, _),
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service="meridian.v1.Inference"), timeout=30
        )
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        await running.drain()
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()


async def test_stop_ends_an_open_call_unavailable_and_closes_its_backend() -> None:
    backend = GatedBackend(token("Hello"))
    async with h2_server(backend) as (running, engine):
        client = await RawClient.connect(running.port)
        await send_chat(client)
        await client.until(lambda: client.seen(h2.events.DataReceived, 1))
        await running.close(grace_s=0)
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        assert client.header_blocks(1)[-1][b"grpc-status"] == b"14"  # UNAVAILABLE
        assert backend.closed and not call_tasks() and engine.active_calls() == 0
        await client.close()


async def test_bytes_a_call_never_read_are_given_back_to_the_connection() -> None:
    backend = GatedBackend(token("Hello"))
    backend.gate.set()
    async with h2_server(backend) as (running, _):
        client = await RawClient.connect(running.port)
        window = client.h2.outbound_flow_control_window
        request = grpc_frame(chat().SerializeToString())
        client.h2.send_headers(1, request_headers())  # a unary request with a second message
        data = request + grpc_frame(b"z" * 60_000)
        for start in range(0, len(data), 16_384):  # the largest frame the server takes
            client.h2.send_data(1, data[start : start + 16_384])
        client.flush()
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        # Else the connection would be left ~60 KB short for every later call.
        await client.until(lambda: client.h2.outbound_flow_control_window == window)
        await client.close()


# A PING is due after 50 ms of silence; the answering client gets 5 s to answer each (a
# loaded machine may stall it), the silent one is closed 50 ms after it was pinged.
ANSWERED = H2Limits(keepalive_time_s=0.05, keepalive_timeout_s=5.0)
SILENT = H2Limits(keepalive_time_s=0.05, keepalive_timeout_s=0.05)


async def test_a_client_that_answers_keepalive_pings_keeps_its_connection() -> None:
    async with h2_server(GatedBackend(token("x")), ANSWERED) as (running, engine):
        client = await RawClient.connect(running.port)

        def pings() -> int:
            return sum(isinstance(e, h2.events.PingReceived) for e in client.events)

        await client.until(lambda: pings() >= 3)  # each answered (h2 acks a PING it reads)
        assert len(engine.connections) == 1
        await client.close()


async def test_a_silent_peer_is_closed_after_an_unanswered_ping() -> None:
    async with h2_server(GatedBackend(token("x")), SILENT) as (running, engine):
        client = await RawClient.connect(running.port)
        await settle(lambda: not engine.connections)  # it never read the PING
        with pytest.raises(ConnectionError):
            await client.until(lambda: False)
        await client.close()


async def test_metadata_grpc_does_not_allow_ends_the_call_internal() -> None:
    class BadMetadata(GatedBackend):
        async def stream(self, request: BackendRequest) -> AsyncGenerator[BackendEvent, None]:
            yield StreamOpened((("x-meridian-route", "line\r\nbreak"),))

    async with h2_server(BadMetadata(token("x"))) as (running, _):
        client = await RawClient.connect(running.port)
        await send_chat(client)
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        (only,) = client.header_blocks(1)
        assert only[b"grpc-status"] == b"13" and b"x-meridian-route" not in only
        await client.close()


async def test_a_message_larger_than_a_frame_is_sent_in_frames_without_waiting() -> None:
    backend = GatedBackend(token("Hello"), token("z" * 40_000))  # 16 KiB frames, 64 KiB window
    backend.gate.set()
    async with h2_server(backend) as (running, _):
        client = await RawClient.connect(running.port)
        await send_chat(client)
        await client.until(lambda: client.seen(h2.events.StreamEnded, 1))
        raw, contents = client.data(1), []
        while raw:
            size = int.from_bytes(raw[1:5])
            contents.append(pb.ChatCompletionChunk.FromString(raw[5 : 5 + size]))
            raw = raw[5 + size :]
        assert [len(c.choices[0].delta.content) for c in contents] == [5, 40_000]
        assert client.header_blocks(1)[-1][b"grpc-status"] == b"0"
        await client.close()


async def test_a_stream_beyond_the_limit_is_refused_and_the_connection_goes_on() -> None:
    backend = GatedBackend(token("Hello"), token(" world"))
    async with h2_server(backend, H2Limits(max_concurrent_streams=2)) as (running, _):
        client = await RawClient.connect(running.port)
        # The raw client would enforce the server's limit itself: lift it on the client's side.
        codes = h2.settings.SettingCodes
        settings = {codes(code): value for code, value in client.h2.remote_settings.items()}
        settings[codes.MAX_CONCURRENT_STREAMS] = 100
        client.h2.remote_settings = h2.settings.Settings(client=False, initial_values=settings)
        body = grpc_frame(chat(max_tokens=5).SerializeToString())
        for stream_id in (1, 3, 5):  # all in one write: the third is one over the limit
            client.h2.send_headers(stream_id, request_headers())
            client.h2.send_data(stream_id, body, end_stream=True)
        client.h2.ping(b"after-it")  # a frame behind the refused one, in the same read
        client.flush()
        await client.until(
            lambda: (
                client.seen(h2.events.StreamReset, 5)
                and client.seen(h2.events.PingAckReceived)
                and client.seen(h2.events.DataReceived, 1)
                and client.seen(h2.events.DataReceived, 3)
            )
        )
        reset = next(e for e in client.events if isinstance(e, h2.events.StreamReset))
        assert (reset.stream_id, reset.error_code) == (5, h2.errors.ErrorCodes.REFUSED_STREAM)
        assert not client.seen(h2.events.ResponseReceived, 5)
        backend.gate.set()
        await client.until(
            lambda: client.seen(h2.events.StreamEnded, 1) and client.seen(h2.events.StreamEnded, 3)
        )
        # A call after them on the same connection: still open, and HPACK still in step (the
        # refused block was decoded, so the client's dynamic-table entries match the server's).
        await send_chat(client, 7)
        await client.until(lambda: client.seen(h2.events.StreamEnded, 7))
        for stream_id in (1, 3, 7):
            assert client.header_blocks(stream_id)[-1][b"grpc-status"] == b"0"
        assert not client.seen(h2.events.ConnectionTerminated)
        await client.close()
