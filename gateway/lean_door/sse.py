"""An SSE response on a lean door connection: the head goes out with the first chunk, each
later write is one framed chunk, the terminator ends the response and frees the connection
for its next request."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.config import StreamsConfig
from gateway.impossible import ImpossibleState
from gateway.lean_door.response import response_head
from gateway.sse_writer import SSE_HEADERS, SseSink

if TYPE_CHECKING:
    from gateway.lean_door.connection import LeanConnection

_TERMINATOR = b"0\r\n\r\n"


class _Written:
    """The bytes a response wrote (``OutputCount``, for the push sink). An object of its own:
    a sink counting into itself would be its own referent, a cycle that kept the whole
    request (its exchange, upstream response, transport) for the collector."""

    __slots__ = ("output_size",)

    def __init__(self) -> None:
        self.output_size = 0


class LeanSse(SseSink):
    def __init__(self, connection: LeanConnection, config: StreamsConfig) -> None:
        super().__init__(config)
        self._connection = connection
        self._head: bytes | None = None  # the head, until the first write takes it along
        self._started = False
        self.ended = False  # the terminator went out
        self._written = _Written()

    @property
    def started(self) -> bool:
        return self._started

    @property
    def head_sent(self) -> bool:
        return self._started and self._head is None

    def reply(self) -> web.StreamResponse | None:
        return None

    def _transport(self) -> asyncio.Transport | None:
        return self._connection.live_transport()

    async def _drain(self) -> None:
        await self._connection.drain()

    def _set_send_buffer(self, transport: asyncio.Transport, size: int) -> None:
        if self._connection.send_buffer != size:  # once per connection
            super()._set_send_buffer(transport, size)
            self._connection.send_buffer = size

    async def start(self, headers: Mapping[str, str], *, flush: bool = False) -> None:
        connection = self._connection
        transport = self._open_transport()
        self._head = response_head(
            200, {**headers, **SSE_HEADERS}.items(), length=None, close=connection.closing
        )
        self._started = True
        self._configure(transport)
        if flush:
            self._send(transport, self._head)
            self._head = None

    def _open_transport(self) -> asyncio.Transport:
        transport = self._connection.live_transport()
        if transport is None or transport.is_closing():
            raise ConnectionResetError("client connection closed")
        return transport

    def _send(self, transport: asyncio.Transport, data: bytes) -> None:
        self._written.output_size += len(data)
        transport.write(data)

    async def _first_write(self, data: bytes) -> asyncio.Transport:
        if not self._started:
            raise ImpossibleState("an SSE write before the response started")
        transport = self._open_transport()
        frame = b"%x\r\n%b\r\n" % (len(data), data) if data else b""
        self._send(transport, (self._head or b"") + frame)
        self._head = None
        self._raw, self._chunked = transport, self._written
        return transport

    async def end(self, last: bytes) -> None:
        if not self._started:
            raise ImpossibleState("an SSE end before the response started")
        transport = self._open_transport()
        frame = b"%x\r\n%b\r\n" % (len(last), last) if last else b""
        self._send(transport, (self._head or b"") + frame + _TERMINATOR)
        self._head = None
        self.ended = True
        await self._after_write(transport)

    async def fail(self, event: bytes) -> None:
        await self.end(event)

    def finish(self) -> bool:
        """After the runner returned: end a response it left open (a broken stream's error
        event went out; the terminator has not). False: the connection cannot be reused."""
        if self.ended:
            return True
        transport = self._connection.live_transport()
        if not self._started or transport is None or transport.is_closing():
            return False
        self._send(transport, (self._head or b"") + _TERMINATOR)
        self._head = None
        self.ended = True
        return True
