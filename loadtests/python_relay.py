"""The floor of a byte relay written in Python: what any Python gateway pays before doing anything.

    python -m loadtests.python_relay --backend http://127.0.0.1:PORT [--port 0]

An HTTP/1.1 relay on uvloop with nothing a gateway does: no routing, no parsing of the body or
of the events, no timing, no metrics, no logs, no timeouts. Each client connection is an
``asyncio.Protocol``; a request's bytes, once ``httptools`` has seen the end of it, go as they
came to an idle kept-alive backend connection (a new one only when none is idle), and every read
of the answer is written to the client as it came (the backend's own chunked framing) inside
the read's callback: no task, no queue, no await on the path. The backend's answer is parsed
only to see where it ends, so the connection can serve the next request.

``--server aiohttp`` puts aiohttp's web server in front instead (``web.Application``, one
catch-all handler: the body read, the backend's answer parsed by ``httptools`` and each piece
of its body written with ``StreamResponse.write``), the server Meridian's HTTP door runs on.

``bench_peers --peers python-relay aiohttp-relay`` runs both beside nginx (the floor of a relay
in C) and Meridian: the gap between nginx and the first is the interpreter's share of a relay
on this host, the gap between the two relays is aiohttp's, and what is left up to Meridian is
what the gateway itself does. A measurement tool only: it trusts both sides, so it must never
face a network.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import cast
from urllib.parse import urlsplit

import httptools
from aiohttp import web


class _BackendConnection(asyncio.Protocol):
    """One kept-alive connection to the backend, relaying one answer at a time."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.client: asyncio.Transport | None = None  # whom the answer in progress goes to

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.client is not None:
            self.client.write(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:  # httptools: the answer ended; serve the next one
        self.client = None
        self.parser = httptools.HttpResponseParser(self)
        self.relay.idle.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.relay.idle:
            self.relay.idle.remove(self)
        if self.client is not None:
            self.client.close()


class _ClientConnection(asyncio.Protocol):
    """One client connection: each whole request goes to an idle backend connection."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.pending.append(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def on_message_complete(self) -> None:  # httptools: the request is whole
        request, self.pending = b"".join(self.pending), []
        if self.transport is not None:
            self.relay.forward(request, self.transport)


class Relay:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[_BackendConnection] = []
        self.connecting: set[asyncio.Task[None]] = set()

    def forward(self, request: bytes, client: asyncio.Transport) -> None:
        if self.idle:
            self._send(self.idle.pop(), request, client)
            return
        task = asyncio.get_running_loop().create_task(self._connect_and_send(request, client))
        self.connecting.add(task)
        task.add_done_callback(self.connecting.discard)

    async def _connect_and_send(self, request: bytes, client: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        _, backend = await loop.create_connection(
            lambda: _BackendConnection(self), self.host, self.port
        )
        self._send(backend, request, client)

    @staticmethod
    def _send(backend: _BackendConnection, request: bytes, client: asyncio.Transport) -> None:
        backend.client = client
        if backend.transport is not None:
            backend.transport.write(request)


class _Answer:
    """The backend's answer to one aiohttp request, as ``httptools`` parses it: the head on a
    future, each piece of the body on a queue (None: the end)."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.head: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        self.body: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.parser = httptools.HttpResponseParser(self)
        self._content_type = b"application/json"
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self._content_type = value

    def on_headers_complete(self) -> None:
        self.head.set_result((self.parser.get_status_code(), self._content_type))

    def on_body(self, body: bytes) -> None:
        self.body.put_nowait(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.body.put_nowait(None)


class _AnsweringConnection(asyncio.Protocol):
    """A kept-alive backend connection for the aiohttp front: it feeds the current answer."""

    def __init__(self, idle: list[_AnsweringConnection]) -> None:
        self.idle = idle
        self.transport: asyncio.Transport | None = None
        self.answer: _Answer | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        answer = self.answer
        if answer is not None:
            answer.parser.feed_data(data)
            if answer.complete:  # the connection may serve the next request
                self.answer = None
                self.idle.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.idle:
            self.idle.remove(self)


def aiohttp_app(host: str, port: int) -> web.Application:
    idle: list[_AnsweringConnection] = []
    origin = f"{host}:{port}".encode()

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n" % (
            request.method.encode(),
            request.path_qs.encode(),
            origin,
        )
        message = head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        if idle:
            backend = idle.pop()
        else:
            loop = asyncio.get_running_loop()
            _, backend = await loop.create_connection(
                lambda: _AnsweringConnection(idle), host, port
            )
        answer = backend.answer = _Answer()
        if backend.transport is not None:
            backend.transport.write(message)
        status, content_type = await answer.head
        response = web.StreamResponse(status=status)
        response.content_type = content_type.decode().split(";")[0]
        await response.prepare(request)
        while (piece := await answer.body.get()) is not None:
            await response.write(piece)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", relay)
    return app


async def serve(backend_url: str, port: int, server_kind: str = "protocol") -> None:
    parts = urlsplit(backend_url)
    host, backend_port = parts.hostname or "127.0.0.1", parts.port or 80
    loop = asyncio.get_running_loop()
    if server_kind == "aiohttp":
        runner = web.AppRunner(aiohttp_app(host, backend_port), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        print(f"python_relay listening on {site.name}", flush=True)
        await asyncio.Event().wait()
        return
    relay = Relay(host, backend_port)
    server = await loop.create_server(lambda: _ClientConnection(relay), "127.0.0.1", port)
    bound = server.sockets[0].getsockname()[1]
    print(f"python_relay listening on http://127.0.0.1:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.python_relay", description=__doc__)
    parser.add_argument("--backend", required=True, help="the backend's base URL")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--server", choices=["protocol", "aiohttp"], default="protocol")
    args = parser.parse_args(argv)
    import uvloop

    try:
        uvloop.run(serve(args.backend, args.port, args.server))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
