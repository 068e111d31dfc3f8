"""Writing an SSE response to a client that may be slow, with bounded memory per stream.

aiohttp's ``StreamResponse.write`` hands bytes to the transport and only waits for it to drain
once 64 KiB have been written since the last wait, so on its own a slow reader lets the
transport's buffer grow past its high-water mark by up to that much. :class:`SseWriter` sets
the high-water mark explicitly (half the stream's ``buffer_bytes``; the other half is the
upstream reader's, see ``UpstreamClient.read_bufsize``) and, after a write leaves more than
that queued, waits for the client to take it — at most ``write_timeout_s``, then the client is
cut off (:class:`ClientTooSlow`). The socket's kernel send buffer is fixed too
(``send_buffer_bytes``), so a stalled client cannot park megabytes in the kernel either, and the
write timeout starts soon after the client stops reading. While it waits nothing is read from upstream, so the upstream
socket fills and TCP pushes back on the backend. Other streams never wait for this one.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping

from aiohttp import web

from gateway.config import StreamsConfig
from gateway.impossible import ImpossibleState
from gateway.sse import comment


class ClientTooSlow(Exception):
    """The client did not take the buffered bytes within the write timeout."""


# Set as headers, not through ``content_type`` (which parses and re-renders the value).
_SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


class SseWriter:
    def __init__(self, request: web.Request, config: StreamsConfig) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self._high = config.buffer_bytes // 2
        self._timeout_s = config.write_timeout_s
        self._send_buffer = config.send_buffer_bytes
        self._upstream_held: Callable[[], int] = lambda: 0
        self.max_buffered = 0  # most bytes held for this stream: client transport + upstream

    @property
    def started(self) -> bool:
        return self.response is not None

    async def start(self, headers: Mapping[str, str], *, flush: bool = False) -> None:
        """Send the 200 and SSE headers (with the first write, or now when ``flush``)."""
        response = web.StreamResponse(status=200, headers={**headers, **_SSE_HEADERS})
        await response.prepare(self.request)
        self.response = response
        transport = self.request.transport
        if transport is not None:
            transport.set_write_buffer_limits(high=self._high, low=self._high // 4)
            # Only when configured: uvloop builds a socket object for every "socket" asked for.
            sock = transport.get_extra_info("socket") if self._send_buffer is not None else None
            if sock is not None and self._send_buffer is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
        if flush:
            self.request.writer.send_headers()

    def track_upstream(self, held: Callable[[], int]) -> None:
        """Count what the upstream side holds too (``UpstreamExchange.buffered_bytes``)."""
        self._upstream_held = held

    def held_now(self) -> int:
        """Bytes held for this stream now; read at scrape time (a stuck stream shows up)."""
        transport = self.request.transport
        queued = transport.get_write_buffer_size() if transport is not None else 0
        self._note_held(queued)
        return queued + self._upstream_held()

    def _note_held(self, queued: int) -> None:
        held = queued + self._upstream_held()
        if held > self.max_buffered:
            self.max_buffered = held

    async def write(self, data: bytes) -> None:
        """Write, then wait while the client is behind."""
        if self.response is None:
            raise ImpossibleState("an SSE write before the response started")
        if len(data) > self._high // 4:
            # A write this large can fill the buffer by itself; aiohttp may wait inside it.
            try:
                async with asyncio.timeout(self._timeout_s):
                    await self.response.write(data)
            except TimeoutError:
                raise ClientTooSlow(self._too_slow()) from None
        else:
            await self.response.write(data)
        transport = self.request.transport
        if transport is None:
            raise ConnectionResetError("client connection closed")
        queued = transport.get_write_buffer_size()
        self._note_held(queued)
        if queued > self._high:
            try:
                await self._wait_for_client()
            finally:  # while we waited, the upstream reader filled up to its own limit
                self._note_held(transport.get_write_buffer_size())

    async def _wait_for_client(self) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self.request.writer.drain()
        except TimeoutError:
            raise ClientTooSlow(self._too_slow()) from None

    def _too_slow(self) -> str:
        return f"client took none of {self._high} buffered bytes within {self._timeout_s:.1f}s"

    async def keepalive(self) -> None:
        await self.write(comment("keepalive"))

    async def end(self, last: bytes) -> None:
        await self.write(last)
        if self.response is not None:  # write() raised otherwise
            await self.response.write_eof()

    def abort(self) -> None:
        """Cut the client off (it is too slow): no more bytes, the connection closes."""
        transport = self.request.transport
        if transport is not None:
            transport.abort()
