"""gateway/sse_writer.py: after the first write, chunks go straight to the transport.

A real aiohttp server writes through :class:`SseWriter`; a raw socket client reads the bytes
and parses them with llhttp (httptools), so the chunked framing itself is what is checked: every
event once and in order, one terminator, nothing after it, and the connection still good for
the next request (keep-alive).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httptools
import pytest
from aiohttp import web

from gateway.config import StreamsConfig
from gateway.sse_writer import SseWriter

EVENTS = [f'data: {{"n": {i}}}\n\n'.encode() for i in range(5)]
LAST = b"data: [DONE]\n\n"


async def _handler(request: web.Request) -> web.StreamResponse:
    writer = SseWriter(request, StreamsConfig())
    await writer.start({"X-Request-Id": "r"})
    for event in EVENTS:
        await writer.write(event)
        await writer.write(b"")  # nothing to send: must not end the body
    await writer.end(LAST)
    assert writer.response is not None
    return writer.response


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, int]]:
    app = web.Application()
    app.router.add_get("/sse", _handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield host, port
    await runner.cleanup()


class _Response:
    def __init__(self) -> None:
        self.body = bytearray()
        self.complete = asyncio.Event()
        self.status = 0

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete.set()


async def _one(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, leftover: bytes
) -> tuple[_Response, httptools.HttpResponseParser, bytes]:
    writer.write(b"GET /sse HTTP/1.1\r\nHost: x\r\n\r\n")
    response = _Response()
    parser = httptools.HttpResponseParser(response)
    seen = bytearray(leftover)
    if leftover:
        parser.feed_data(leftover)
    while not response.complete.is_set():
        data = await reader.read(65536)
        assert data, "the server closed before the response was complete"
        seen += data
        parser.feed_data(data)
    return response, parser, bytes(seen)


async def test_every_chunk_once_in_order_then_one_terminator_and_keep_alive(
    server: tuple[str, int],
) -> None:
    reader, writer = await asyncio.open_connection(*server)
    try:
        for _ in range(2):  # the second request on the same connection: keep-alive intact
            response, parser, seen = await _one(reader, writer, b"")
            assert parser.get_status_code() == 200
            assert bytes(response.body) == b"".join(EVENTS) + LAST
            assert seen.endswith(b"0\r\n\r\n")
            assert seen.count(b"\r\n0\r\n\r\n") == 1  # one terminator, nothing after it
    finally:
        writer.close()
        await writer.wait_closed()
