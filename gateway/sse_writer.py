"""Writing an SSE response to a client that may be slow, with bounded memory per stream.

:class:`SseSink` is what the door's runner writes a stream to, whichever server read the
request: :class:`SseWriter` on aiohttp's web server, :class:`gateway.lean_door.sse.LeanSse` on
the lean door's own connections. Both frame each write as one HTTP/1.1 chunk on the transport
themselves once the headers went out; they differ in how the headers go out and how the end
of the response is told to the server.

aiohttp's ``StreamResponse.write`` hands bytes to the transport and only waits for it to drain
once 64 KiB have been written since the last wait, so on its own a slow reader lets the
transport's buffer grow past its high-water mark by up to that much. A sink sets the
high-water mark explicitly and, after a write leaves more than that queued, waits for the
client to take it — at most ``write_timeout_s``, then the client is
cut off (:class:`ClientTooSlow`). The socket's kernel send buffer is fixed too
(``send_buffer_bytes``), so a stalled client cannot park megabytes in the kernel either, and the
write timeout starts soon after the client stops reading. While it waits nothing is read from upstream, so the upstream
socket fills and TCP pushes back on the backend. Other streams never wait for this one.

The budget: half of ``buffer_bytes`` is the upstream reader's (``UpstreamClient.read_bufsize``
is a quarter; it pauses its socket past twice that, one capped socket read late at most), half
the client transport's. The relay takes at most ``read_bufsize`` from the reader per write, so
the high-water mark is a quarter: a write that starts just under it still ends under half.

The headers wait for the first write and go out with it, in one system call (aiohttp >= 3.11
sends a ``StreamResponse``'s headers on their own at ``prepare`` unless told to buffer them:
:class:`_SseResponse`); a stream whose whole answer came in its first upstream read — headers,
events, terminator — is one write. After the first write each write is framed as one HTTP/1.1
chunk and handed straight to the transport: aiohttp's per-write layers
(``StreamResponse.write`` -> ``StreamWriter.write`` -> chunk framing -> ``writelines``) cost
every relayed event four Python calls, and the last event and the chunked terminator go out
in one write instead of two. The socket's send buffer is set once per connection, not once per
request of a keep-alive connection (uvloop builds a socket object and makes two system calls
for it).
"""

from __future__ import annotations

import asyncio
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from aiohttp.http_writer import StreamWriter

from gateway.config import StreamsConfig
from gateway.http_socket.protocol import DoorRequestHandler
from gateway.impossible import ImpossibleState
from gateway.lag_timeout import LagForgivingTimeout
from gateway.sse import comment


class ClientTooSlow(Exception):
    """The client did not take the buffered bytes within the write timeout."""


# Set as headers, not through ``content_type`` (which parses and re-renders the value).
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


class OutputCount(Protocol):
    """Where the bytes written for a response are counted (aiohttp's ``StreamWriter`` is one)."""

    output_size: int


@dataclass(frozen=True, slots=True)
class RawOut:
    """A started SSE response's client side, for a writer that frames chunks itself:
    ``transport.write(b"%x\\r\\n%b\\r\\n" % (len(data), data))``, counted in
    ``chunked.output_size``; a queue left over ``high`` bytes means the client is behind, and
    any bytes left queued go to ``note_held`` (the stream's peak). :meth:`SseSink.push`."""

    transport: asyncio.Transport
    chunked: OutputCount
    high: int
    note_held: Callable[[int], None]


class SseSink(ABC):
    """One SSE response: headers, then chunks written as they come, bounded by the client."""

    def __init__(self, config: StreamsConfig) -> None:
        self._high = config.buffer_bytes // 4  # + one read of read_bufsize: half (module doc)
        self._timeout_s = config.write_timeout_s
        self._send_buffer = config.send_buffer_bytes
        self._upstream_held: Callable[[], int] = lambda: 0
        self.max_buffered = 0  # most bytes held for this stream: client transport + upstream
        # Set once the headers went out with a first write: later chunks are framed here.
        self._raw: asyncio.Transport | None = None
        self._chunked: OutputCount | None = None

    @property
    @abstractmethod
    def started(self) -> bool:
        """Whether :meth:`start` ran (the headers are out or wait for the first write)."""

    @abstractmethod
    async def start(self, headers: Mapping[str, str], *, flush: bool = False) -> None:
        """Send the 200 and SSE headers (with the first write, or now when ``flush``)."""

    @abstractmethod
    async def _first_write(self, data: bytes) -> asyncio.Transport:
        """The headers and ``data``; sets ``_raw`` and ``_chunked`` for what follows."""

    @abstractmethod
    def _transport(self) -> asyncio.Transport | None:
        """The client's transport (None once it is gone)."""

    @abstractmethod
    async def _drain(self) -> None:
        """Wait until the transport is below its low-water mark."""

    @abstractmethod
    async def end(self, last: bytes) -> None:
        """The last bytes and the chunked terminator, in one write."""

    @abstractmethod
    async def fail(self, event: bytes) -> None:
        """Every attempt failed after early headers committed a 200: the error as an event,
        then the response ends."""

    @abstractmethod
    def reply(self) -> web.StreamResponse | None:
        """What the door's handler answers once the stream was written (the lean door: None)."""

    def _configure(self, transport: asyncio.Transport) -> None:
        transport.set_write_buffer_limits(high=self._high, low=self._high // 4)
        if self._send_buffer is not None:
            self._set_send_buffer(transport, self._send_buffer)

    def _set_send_buffer(self, transport: asyncio.Transport, size: int) -> None:
        # uvloop builds a socket object for every "socket" asked for: only when configured.
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)

    def track_upstream(self, held: Callable[[], int]) -> None:
        """Count what the upstream side holds too (``UpstreamExchange.buffered_bytes``)."""
        self._upstream_held = held

    def held_now(self) -> int:
        """Bytes held for this stream now; read at scrape time (a stuck stream shows up)."""
        transport = self._transport()
        queued = transport.get_write_buffer_size() if transport is not None else 0
        self._note_held(queued)
        return queued + self._upstream_held()

    def _note_held(self, queued: int) -> None:
        held = queued + self._upstream_held()
        if held > self.max_buffered:
            self.max_buffered = held

    @property
    def pushable(self) -> bool:
        """Whether :meth:`push` may write now: the headers went out with a first write."""
        return self._raw is not None

    def raw_out(self) -> RawOut | None:
        """Once :attr:`pushable`: what a push sink needs to write framed chunks itself, as
        :meth:`push` does, without a call per read (``gateway/push_phase.py``)."""
        transport, chunked = self._raw, self._chunked
        if transport is None or chunked is None:
            return None
        return RawOut(transport, chunked, self._high, self._note_held)

    def push(self, data: bytes) -> bool:
        """Write now, from any callback (``gateway/push_phase.py``); False when the client is
        behind its mark: the caller stops and awaits :meth:`caught_up`."""
        transport = self._raw
        if transport is None:
            raise ImpossibleState("an SSE push before the first write")
        if not data:
            return True  # an empty chunk would be the body's terminator
        if transport.is_closing():
            raise ConnectionResetError("client connection closed")
        frame = b"%x\r\n%b\r\n" % (len(data), data)
        if self._chunked is not None:
            self._chunked.output_size += len(frame)
        transport.write(frame)
        queued = transport.get_write_buffer_size()
        if queued:  # nothing queued (the usual write): the stream holds a partial event at most
            held = queued + self._upstream_held()  # _note_held, written out: runs every event
            if held > self.max_buffered:
                self.max_buffered = held
        return queued <= self._high

    async def caught_up(self) -> None:
        """Wait while the client is behind (at most the write timeout: :class:`ClientTooSlow`)."""
        if self._raw is not None:
            await self._after_write(self._raw)

    async def write(self, data: bytes) -> None:
        """Write, then wait while the client is behind."""
        transport = self._raw
        if transport is None:
            await self._after_write(await self._first_write(data))
        elif not self.push(data):
            await self._catch_up(transport)

    async def _after_write(self, transport: asyncio.Transport) -> None:
        queued = transport.get_write_buffer_size()
        self._note_held(queued)
        if queued > self._high:
            await self._catch_up(transport)

    async def _catch_up(self, transport: asyncio.Transport) -> None:
        try:
            await self._wait_for_client()
        finally:  # while we waited, the upstream reader filled up to its own limit
            self._note_held(transport.get_write_buffer_size())

    async def _wait_for_client(self) -> None:
        try:
            async with LagForgivingTimeout(self._timeout_s):
                await self._drain()
        except TimeoutError:
            raise ClientTooSlow(self._too_slow()) from None

    def _too_slow(self) -> str:
        return f"client took none of {self._high} buffered bytes within {self._timeout_s:.1f}s"

    async def keepalive(self) -> None:
        await self.write(comment("keepalive"))

    def abort(self) -> None:
        """Cut the client off (it is too slow): no more bytes, the connection closes."""
        transport = self._transport()
        if transport is not None:
            transport.abort()


class _SseResponse(web.StreamResponse):
    """A stream response whose headers wait for its first write and go out with it (one
    system call, one TCP segment to the client); aiohttp's own switch for it."""

    _send_headers_immediately = False


class SseWriter(SseSink):
    """An SSE response on aiohttp's web server."""

    def __init__(self, request: web.Request, config: StreamsConfig) -> None:
        super().__init__(config)
        self.request = request
        self.response: web.StreamResponse | None = None

    @property
    def started(self) -> bool:
        return self.response is not None

    def reply(self) -> web.StreamResponse | None:
        return self.response

    async def start(self, headers: Mapping[str, str], *, flush: bool = False) -> None:
        response = _SseResponse(status=200, headers={**headers, **SSE_HEADERS})
        await response.prepare(self.request)
        self.response = response
        transport = self.request.transport
        if transport is not None:
            self._configure(transport)
        if flush:
            self.request.writer.send_headers()

    def _set_send_buffer(self, transport: asyncio.Transport, size: int) -> None:
        """Once per connection of the gateway's door (it remembers); on another server's
        connection (a test's plain aiohttp), every time."""
        protocol = self.request.protocol
        door = protocol if isinstance(protocol, DoorRequestHandler) else None
        if door is not None and door.send_buffer == size:
            return
        super()._set_send_buffer(transport, size)
        if door is not None:
            door.send_buffer = size

    def _transport(self) -> asyncio.Transport | None:
        return self.request.transport

    async def _drain(self) -> None:
        await self.request.writer.drain()

    async def _first_write(self, data: bytes) -> asyncio.Transport:
        """Through aiohttp's writer, which sends the buffered headers with it."""
        response = self.response
        if response is None:
            raise ImpossibleState("an SSE write before the response started")
        if len(data) > self._high // 4:
            # A write this large can fill the buffer by itself; aiohttp may wait inside it.
            try:
                async with LagForgivingTimeout(self._timeout_s):
                    await response.write(data)
            except TimeoutError:
                raise ClientTooSlow(self._too_slow()) from None
        else:
            await response.write(data)
        transport = self.request.transport
        if transport is None:
            raise ConnectionResetError("client connection closed")
        writer = self.request.writer
        if isinstance(writer, StreamWriter) and writer.chunked and not response.compression:
            self._raw, self._chunked = transport, writer  # always, for SSE
        return transport

    async def end(self, last: bytes) -> None:
        transport, response, writer = self._raw, self.response, self._chunked
        if transport is None and response is not None and 0 < len(last) <= self._high // 4:
            # The whole answer at once (it came in the first upstream read): headers, last
            # bytes and terminator in one write, by aiohttp, which still holds the headers.
            await response.write_eof(last)
            if (transport := self.request.transport) is not None:
                await self._after_write(transport)
            return
        if transport is None or response is None or not isinstance(writer, StreamWriter):
            await self.write(last)
            if self.response is not None:  # write() raised otherwise
                await self.response.write_eof()
            return
        if transport.is_closing():
            raise ConnectionResetError("client connection closed")
        frame = b"%x\r\n%b\r\n0\r\n\r\n" % (len(last), last)
        writer.output_size += len(frame)
        transport.write(frame)
        # The terminator is written: aiohttp's write_eof must not write another one. Unchunked,
        # with nothing left to write, it only marks the response finished (keep-alive intact).
        writer.chunked = False
        await response.write_eof()
        await self._after_write(transport)

    async def fail(self, event: bytes) -> None:
        await self.write(event)
        if self.response is not None:
            await self.response.write_eof()
