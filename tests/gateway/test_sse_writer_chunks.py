"""gateway/sse_writer.py: after the first write, chunks go straight to the transport.

A real aiohttp server writes through :class:`SseWriter`; a raw socket client reads the bytes
and parses them with llhttp (httptools), so the chunked framing itself is what is checked: every
event once and in order, one terminator, nothing after it, and the connection still good for
the next request (keep-alive). The server's transport counts its writes (each one a system
call and a segment to the client): the headers leave with the first write, and an answer
written all at once is one write.
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


WRITES = web.AppKey("writes", list[bytes])


async def _counted(request: web.Request) -> web.StreamResponse:
    """``?events=N``: N writes, then the end; every transport write is recorded."""
    transport = request.transport
    assert transport is not None
    writes = request.app[WRITES]
    write = transport.write

    def counting(data: bytes | bytearray | memoryview) -> None:
        writes.append(bytes(data))
        write(data)

    transport.write = counting  # type: ignore[method-assign]  # asyncio's selector transport
    try:
        writer = SseWriter(request, StreamsConfig())
        await writer.start({"X-Request-Id": "r"})
        for event in EVENTS[: int(request.query["events"])]:
            await writer.write(event)
        await writer.end(LAST)
    finally:
        transport.write = write  # type: ignore[method-assign]
    assert writer.response is not None
    return writer.response


@pytest.fixture
async def served() -> AsyncIterator[tuple[tuple[str, int], list[bytes]]]:
    """The server's address, and the writes of its ``/counted`` responses."""
    app = web.Application()
    app[WRITES] = []
    app.router.add_get("/sse", _handler)
    app.router.add_get("/counted", _counted)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield (host, port), app[WRITES]
    await runner.cleanup()


@pytest.fixture
def server(served: tuple[tuple[str, int], list[bytes]]) -> tuple[str, int]:
    return served[0]


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
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, leftover: bytes, path: str = "/sse"
) -> tuple[_Response, httptools.HttpResponseParser, bytes]:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
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


@pytest.mark.parametrize("events", [0, 1, 3])
async def test_the_headers_leave_with_the_first_write_and_a_whole_answer_is_one_write(
    served: tuple[tuple[str, int], list[bytes]], events: int
) -> None:
    server, app_writes = served
    reader, writer = await asyncio.open_connection(*server)
    try:
        for _ in range(2):  # keep-alive: the second request on the connection alike
            response, _, seen = await _one(reader, writer, b"", f"/counted?events={events}")
            assert bytes(response.body) == b"".join(EVENTS[:events]) + LAST
            assert b"".join(app_writes) == seen  # everything the client got, and only that
            assert len(app_writes) == events + 1  # headers with the first, the end with the last
            assert app_writes[0].startswith(b"HTTP/1.1 200")
            assert (EVENTS[0] if events else LAST) in app_writes[0]
            assert app_writes[-1].endswith(LAST + b"\r\n0\r\n\r\n")
            app_writes.clear()
    finally:
        writer.close()
        await writer.wait_closed()
