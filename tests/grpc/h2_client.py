"""A raw HTTP/2 client (h2 over a real loopback socket) for what the grpcio client cannot show:
which frames the h2 engine sends, in which writes, against a client that misbehaves (resets,
never sends its request, stops reading). Every read is bounded (``hang_bound``)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings

from gateway.grpc.server import GrpcServerConfig, RunningGrpcServer, serving_grpc
from gateway.grpc_h2.limits import H2Limits
from gateway.grpc_h2.server import H2GrpcServer
from gateway.lifecycle.seam import (
    BackendEvent,
    BackendRequest,
    ModelEntry,
    StreamChunk,
    StreamEnded,
    StreamOpened,
)
from tests.grpc.grpc_support import chat
from tests.servers import hang_bound

CHAT_PATH = b"/meridian.v1.Inference/ChatCompletion"


def grpc_frame(message: bytes) -> bytes:
    return struct.pack(">BI", 0, len(message)) + message


def request_headers(path: bytes = CHAT_PATH, *extra: tuple[bytes, bytes]) -> list[Any]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path),
        (b":authority", b"127.0.0.1"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        *extra,
    ]


class GracefulGoawayClient(h2.connection.H2Connection):
    """python-h2 takes any GOAWAY as the end: its state machine closes and it takes nothing more
    in. RFC 9113 6.8 lets the streams up to the GOAWAY's last stream id go on (grpc-core and Go
    clients do): a NO_ERROR GOAWAY is recorded as an event and the connection stays open."""

    def _receive_goaway_frame(self, frame: Any) -> tuple[list[Any], list[Any]]:
        if frame.error_code != h2.errors.ErrorCodes.NO_ERROR:
            return super()._receive_goaway_frame(frame)
        event = h2.events.ConnectionTerminated()
        event.error_code = h2.errors.ErrorCodes.NO_ERROR
        event.last_stream_id = frame.last_stream_id
        return [], [event]


@dataclass
class RawClient:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    h2: h2.connection.H2Connection
    events: list[Any] = field(default_factory=list)
    acknowledge: bool = True  # give the server its window back as data arrives

    @classmethod
    async def connect(cls, port: int, initial_window: int | None = None) -> RawClient:
        client = await cls.start(port, initial_window)
        await client.handshake()
        return client

    @classmethod
    async def start(cls, port: int, initial_window: int | None = None) -> RawClient:
        """Connected, with the preface queued and not sent (frames queued before
        :meth:`handshake` go with it, in one write)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = GracefulGoawayClient(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        conn.initiate_connection()
        if initial_window is not None:
            conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: initial_window})
        return cls(reader, writer, conn)

    async def handshake(self) -> None:
        self.flush()
        # The handshake is over when the server's SETTINGS came and it acknowledged ours.
        await self.until(lambda: self.seen(h2.events.SettingsAcknowledged))
        await self.until(lambda: self.seen(h2.events.RemoteSettingsChanged))

    def flush(self) -> None:
        self.writer.write(self.h2.data_to_send())

    def seen(self, kind: type, stream_id: int | None = None) -> bool:
        return any(
            isinstance(e, kind) and (stream_id is None or getattr(e, "stream_id", 0) == stream_id)
            for e in self.events
        )

    async def until(self, done: Callable[[], bool], within_s: float = 10.0) -> None:
        async with asyncio.timeout(hang_bound(within_s)):
            while not done():
                data = await self.reader.read(65536)
                if not data:
                    raise ConnectionError("the server closed the connection")
                for event in self.h2.receive_data(data):
                    self.events.append(event)
                    if isinstance(event, h2.events.DataReceived) and self.acknowledge:
                        self.h2.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                self.flush()

    async def until_closed(self) -> None:
        """Read (and answer) until the server closes the connection."""
        with contextlib.suppress(ConnectionError):
            await self.until(lambda: False)

    def data(self, stream_id: int) -> bytes:
        return b"".join(
            e.data
            for e in self.events
            if isinstance(e, h2.events.DataReceived) and e.stream_id == stream_id
        )

    def header_blocks(self, stream_id: int) -> list[dict[bytes, bytes]]:
        kinds = (h2.events.ResponseReceived, h2.events.TrailersReceived)
        return [
            dict(e.headers)
            for e in self.events
            if isinstance(e, kinds) and e.stream_id == stream_id
        ]

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


class GatedBackend:
    """Streams ``StreamOpened`` and ``chunks[0]`` at once, the rest after ``gate`` is set (never,
    unless a test sets it); records whether its stream was closed (the upstream cancelled)."""

    def __init__(self, *chunks: dict[str, Any]) -> None:
        self.chunks = chunks
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.closed = False
        self.requests: list[BackendRequest] = []

    async def stream(self, request: BackendRequest) -> AsyncGenerator[BackendEvent, None]:
        self.requests.append(request)
        self.started.set()
        try:
            yield StreamOpened((("x-meridian-route", "backend=scripted"),))
            yield StreamChunk(dict(self.chunks[0]))
            await self.gate.wait()
            for chunk in self.chunks[1:]:
                yield StreamChunk(dict(chunk))
            yield StreamEnded((("x-meridian-timing", "{}"),))
        finally:
            self.closed = True

    async def list_models(self) -> Sequence[ModelEntry]:
        return []


ENVELOPE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m"}


def token(text: str) -> dict[str, Any]:
    return {**ENVELOPE, "choices": [{"index": 0, "delta": {"content": text}}]}


class Closes(list[str]):
    """An ``H2GrpcServer.closed`` that keeps the reasons it is told."""

    def __call__(self, reason: str) -> None:
        self.append(reason)


def closes(engine: H2GrpcServer) -> list[str]:
    """Why the engine of :func:`h2_server` closed connections itself, in order."""
    assert isinstance(engine.closed, Closes)
    return engine.closed


@asynccontextmanager
async def h2_server(
    backend: GatedBackend, limits: H2Limits | None = None
) -> AsyncIterator[tuple[RunningGrpcServer, H2GrpcServer]]:
    config = GrpcServerConfig(engine="h2")
    async with serving_grpc(backend, config) as running:
        engine = running.server
        assert isinstance(engine, H2GrpcServer)
        if limits is not None:
            engine.limits = limits  # read by each new connection
        engine.closed = Closes()
        yield running, engine


async def send_chat(client: RawClient, stream_id: int = 1, *extra: tuple[bytes, bytes]) -> None:
    queue_chat(client, stream_id, *extra)
    client.flush()


def queue_chat(client: RawClient, stream_id: int = 1, *extra: tuple[bytes, bytes]) -> None:
    body = grpc_frame(chat(max_tokens=5).SerializeToString())
    client.h2.send_headers(
        stream_id, request_headers(b"/meridian.v1.Inference/ChatCompletion", *extra)
    )
    client.h2.send_data(stream_id, body, end_stream=True)


def call_tasks() -> list[asyncio.Task[Any]]:
    """The h2 engine's call tasks still alive (each call runs as one ``Call._run`` task)."""
    return [t for t in asyncio.all_tasks() if "Call._run" in repr(t.get_coro())]
