"""Scripted HTTP/1.1 servers on loopback for the upstream client's tests
(``tests/gateway/test_http_client.py``): each connection is answered by a script; the server
counts connections and requests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from yarl import URL

from gateway.http_client import ConnectionPool
from gateway.upstream_response import UpstreamResponse

Script = Callable[["Scripted", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Serve = Callable[[Script], Awaitable[tuple["Scripted", URL]]]
REQUEST = b"POST /v1/x HTTP/1.1\r\nHost: upstream\r\nContent-Length: 2\r\n\r\n{}"


class Scripted:
    """A server answering each connection with ``script``; counts connections and requests."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.script(self, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def start(self) -> URL:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return URL(f"http://127.0.0.1:{port}")


async def send(pool: ConnectionPool, limit: int = 2**16) -> tuple[UpstreamResponse, bool]:
    conn, reused, _ = await pool.acquire(connect_s=60.0)
    response = conn.send(REQUEST, limit)
    await response.head()
    return response, reused


def keep_alive(body_of: Callable[[int], bytes]) -> Script:
    """Answer every request on the connection with ``body_of(n)`` (n: requests so far)."""

    async def script(
        server: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            await server.read_request(reader)
            writer.write(body_of(len(server.requests)))
            await writer.drain()

    return script


def chunked(*parts: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Seen: a\r\n\r\n" + body
