"""A lean HTTP/1.1 client for the relay's upstream POSTs: one ``send`` per request, llhttp parses.

At concurrency 1 the aiohttp client's request path (``ClientSession.request``: URL and header
objects, tracing signals, the connector's bookkeeping, a header write and a body write) cost
~0.5 ms of CPU per streamed request on the test VM (``docs/results/perf-issue16.md``, Session 5).
The relay needs much less: a POST with a fixed header block to one origin, keep-alive
connections, chunked or content-length bodies, TLS. Here a request is the client's pre-built
header block, the per-request headers and the body joined into one ``transport.write``; the
response is parsed by ``httptools`` (llhttp, the parser of Node.js and uvicorn) straight into a
``gateway.upstream_body.BodyReader`` with the ``readany``/``read``/``set_exception`` surface
the relay reads (``gateway.upstream_response``: one response, its parsing and its head bound).

Back-pressure as aiohttp's: the socket stops being read while more than twice ``read_bufsize``
bytes wait unread. The socket is read into a buffer of :func:`read_chunk_bytes` (a quarter of
``read_bufsize``, at least 4 KiB), never more at once: uvloop's own reads take up to 256,000
bytes, and everything one read brings is fed before the pause can take effect, so one read
could carry a stream far past its bound. Errors are aiohttp's types (the relay and ``gateway/scrub.py`` classify them):
a connection closed before the response head is :class:`aiohttp.ServerDisconnectedError`, one
closed mid-body :class:`aiohttp.ClientPayloadError`, unparsable bytes
:class:`aiohttp.ClientResponseError`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque
from collections.abc import Mapping
from typing import cast

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from gateway import read_lag
from gateway.tcp_connect import (
    SocketAddress,
    connect_socket,
    literal_addresses,
    looked_up,
)
from gateway.upstream_response import UpstreamResponse

_KEEPALIVE_S = 30.0


def read_chunk_bytes(read_bufsize: int) -> int:
    """The most one socket read takes for a response whose reader holds ``read_bufsize``."""
    return max(4096, read_bufsize // 4)


class UpstreamConnection(asyncio.BufferedProtocol):
    """One keep-alive connection: at most one response at a time."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._buffer = memoryview(bytearray(4096))  # sized for the response by send()
        self.transport: asyncio.Transport | None = None
        self.response: UpstreamResponse | None = None
        self.closed = False
        self.idle_since = 0.0
        self._paused = False
        self.sock: read_lag.TcpSocket | None = None  # a TCP connection's, for the kernel's word

    def unread_ms(self) -> float:
        """How long the newest bytes from the backend waited in the kernel before they were
        read (gateway/read_lag.py)."""
        return read_lag.unread_ms(self.sock)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # one write, sent now
            self.sock = sock

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        response = self.response  # data_received, inline: runs for every relayed read
        if response is None:
            self.close()
            return
        response.feed(bytes(self._buffer[:nbytes]))

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # bytes nobody asked for: the connection cannot be trusted
            self.close()
            return
        response.feed(data)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response, self.response = self.response, None
        if response is not None:
            response.lost(exc)
        self._pool.forget(self)

    def send(self, request: bytes, limit: int) -> UpstreamResponse:
        """Write ``request``; the response's head is awaited by the caller. On a connection
        that closed since it was pooled, the head fails as a disconnect (a stale retry)."""
        response = UpstreamResponse(self, limit)
        if len(self._buffer) != (size := read_chunk_bytes(limit)):
            self._buffer = memoryview(bytearray(size))
        if self.transport is None or self.closed or self.transport.is_closing():
            response.lost(None)
            return response
        self.response = response
        self.transport.write(request)
        return response

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()

    def done(self, response: UpstreamResponse, *, reusable: bool) -> None:
        if self.response is response:
            self.response = None
            response.unhook()
        if reusable and not self.closed:
            self.resume()
            self._pool.put_back(self)
        else:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()  # connection_lost follows: the pool forgets it then


class ConnectionPool:
    """Keep-alive connections to one origin, at most ``limit`` open at once."""

    def __init__(
        self,
        url: URL,
        limit: int,
        ssl_context: ssl.SSLContext | bool,
        resolver: AbstractResolver | None = None,
    ) -> None:
        if url.host is None:
            raise ValueError(f"backend URL without a host: {url}")
        self.host: str = url.host
        self.port: int = url.port or (443 if url.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = None
        if url.scheme == "https":
            self._ssl = ssl_context if isinstance(ssl_context, ssl.SSLContext) else _default_tls()
        self._resolver = resolver
        # An IP literal's address, worked out once (a name is looked up at every connect).
        self._literal = literal_addresses(self.host, self.port) if resolver is None else None
        self._limit = limit
        self._idle: list[UpstreamConnection] = []
        self._open: set[UpstreamConnection] = set()
        self._connecting = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.closed = False

    async def acquire(self, connect_s: float) -> tuple[UpstreamConnection, bool, float]:
        """A connection, whether it was pooled, and how long connecting took (ms)."""
        while True:
            if self.closed:
                raise aiohttp.ClientConnectionError("the upstream client was closed")
            now = time.monotonic()
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed and now - conn.idle_since < _KEEPALIVE_S:
                    return conn, True, 0.0
                conn.close()
            if len(self._open) + self._connecting < self._limit:
                started = time.perf_counter()
                conn = await self._connect(connect_s)
                return conn, False, (time.perf_counter() - started) * 1000.0
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def _connect(self, connect_s: float) -> UpstreamConnection:
        self._connecting += 1
        try:
            conn = await self._connect_any(connect_s)
        finally:
            self._connecting -= 1
            self._wake_one()
        if self.closed:
            conn.close()
            raise aiohttp.ClientConnectionError("the upstream client was closed")
        self._open.add(conn)
        return conn

    async def _connect_any(self, connect_s: float) -> UpstreamConnection:
        """The first address that takes the connection, in the resolver's order, all within
        ``connect_s``; whether a handshake made it in time is the kernel's word
        (gateway/tcp_connect.py), not a timer's that the loop ran late."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + connect_s
        targets = self._literal
        if targets is None:
            async with asyncio.timeout_at(deadline):
                targets = await self._lookup()
        failure: OSError = OSError(f"no address for {self.host}")
        for target in targets:
            try:
                sock = await connect_socket(target, deadline)
            except TimeoutError:
                raise  # the deadline is for every address: none is left time
            except OSError as exc:
                failure = exc
                continue
            _, conn = await loop.create_connection(
                lambda: UpstreamConnection(self),
                sock=sock,
                ssl=self._ssl,
                server_hostname=self.host if self._ssl is not None else None,
                ssl_handshake_timeout=connect_s if self._ssl is not None else None,
            )
            return conn
        raise failure

    async def _lookup(self) -> list[SocketAddress]:
        if self._resolver is None:
            return await looked_up(self.host, self.port)  # a name: IP literals never get here
        found = await self._resolver.resolve(self.host, self.port, socket.AF_UNSPEC)
        return [
            (socket.AddressFamily(entry["family"]), (entry["host"], entry["port"]))
            for entry in found
        ]

    def put_back(self, conn: UpstreamConnection) -> None:
        if self.closed:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)
        self._wake_one()

    def forget(self, conn: UpstreamConnection) -> None:
        self._open.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> list[UpstreamConnection]:
        """Close every connection; the ones with a response in flight are returned."""
        self.closed = True
        busy = [conn for conn in self._open if conn.response is not None]
        for conn in list(self._open):
            conn.close()
        self._idle.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        return busy


def _default_tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def header_block(fields: Mapping[str, str]) -> bytes:
    """``Name: value`` lines; a CR, LF or NUL in a field would split the request: refused."""
    lines = []
    for name, value in fields.items():
        line = f"{name}: {value}\r\n"
        if "\r" in line[:-2] or "\n" in line[:-2] or "\x00" in line:
            raise ValueError(f"header {name!r} holds a line break")
        lines.append(line)
    return "".join(lines).encode()
