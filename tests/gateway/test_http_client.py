"""The relay's upstream HTTP/1.1 client (gateway/http_client.py) against scripted servers on
loopback: bodies framed by length, by chunks and by the connection's close; keep-alive reuse;
the connection cap; back-pressure; and every way a response can be broken.

Every wait is for an event (bytes, a connection, a pause); none depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from yarl import URL

from gateway.config import BackendConfig, TimeoutsConfig
from gateway.http_client import (
    ConnectionPool,
    header_block,
    read_chunk_bytes,
)
from gateway.upstream import ConnectionTiming, UpstreamClient
from gateway.upstream_response import MAX_HEAD_BYTES
from tests.gateway.scripted_upstream import (
    REQUEST,
    Script,
    Scripted,
    Serve,
    chunked,
    keep_alive,
    send,
)


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    started: list[Scripted] = []

    async def start(script: Script) -> tuple[Scripted, URL]:
        server = Scripted(script)
        started.append(server)
        return server, await server.start()

    yield start
    for server in started:
        assert server.server is not None
        server.server.close()
        await server.server.wait_closed()


async def test_chunked_and_length_bodies_reuse_one_connection(serve: Serve) -> None:
    def body_of(n: int) -> bytes:
        if n % 2:
            return chunked(b"data: one\n\n", b"data: two\n\n")
        return b"HTTP/1.1 503 Busy\r\nContent-Length: 5\r\nRetry-After: 2\r\n\r\nbusy!"

    server, url = await serve(keep_alive(body_of))
    pool = ConnectionPool(url, 4, True)
    try:
        first, reused = await send(pool)
        assert (first.status, reused, first.headers["x-seen"]) == (200, False, "a")
        assert await first.read() == b"data: one\n\ndata: two\n\n"
        first.release()
        second, reused = await send(pool)
        assert (second.status, reused, second.headers["Retry-After"]) == (503, True, "2")
        assert await second.content.read(3) == b"bus"
        second.close()  # not read to the end: the connection is not reused
        third, reused = await send(pool)
        assert reused is False and await third.read() == b"data: one\n\ndata: two\n\n"
        third.release()
    finally:
        pool.close()
    assert server.connections == 2 and len(server.requests) == 3
    assert server.requests[0] == REQUEST


async def test_a_body_framed_by_the_close_ends_with_it(serve: Serve) -> None:
    async def script(
        _: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        await writer.drain()

    _, url = await serve(script)
    pool = ConnectionPool(url, 1, True)
    response, _ = await send(pool)
    assert await response.read() == b"all of it" and response.complete
    response.release()
    pool.close()


async def test_a_connection_closed_mid_body_is_a_payload_error(serve: Serve) -> None:
    async def script(
        _: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
        await writer.drain()

    _, url = await serve(script)
    pool = ConnectionPool(url, 1, True)
    response, _ = await send(pool)
    assert await response.content.readany() == b"only this"
    with pytest.raises(aiohttp.ClientPayloadError):
        await response.content.readany()
    response.close()
    pool.close()


async def test_a_connection_closed_before_the_head_is_a_disconnect(serve: Serve) -> None:
    async def script(
        _: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")

    _, url = await serve(script)
    pool = ConnectionPool(url, 1, True)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await send(pool)
    pool.close()


async def test_bytes_that_are_not_http_are_a_response_error(serve: Serve) -> None:
    async def script(
        server: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if server.connections > 1:  # the second connection is answered properly
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        else:
            writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client hangs up

    scripted, url = await serve(script)
    pool = ConnectionPool(url, 1, True)
    with pytest.raises(aiohttp.ClientResponseError):
        await send(pool)
    response, reused = await send(pool)  # the broken connection was not kept
    assert scripted.connections == 2 and reused is False and response.status == 200
    response.close()
    pool.close()


async def test_a_head_that_never_ends_is_refused_at_its_bound(serve: Serve) -> None:
    """A backend streaming one endless header: refused once the head passes MAX_HEAD_BYTES,
    not held in memory while it grows; the connection is closed, not pooled."""
    sent: list[int] = []

    async def script(
        server: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        if server.connections > 1:  # the second connection is answered properly
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await reader.read()
            return
        writer.write(b"HTTP/1.1 200 OK\r\nX-Endless: ")
        while True:  # until the client hangs up (a ConnectionError ends the script)
            writer.write(b"a" * 4096)
            sent.append(4096)
            await writer.drain()
            if reader.at_eof():
                return
            await asyncio.sleep(0)

    scripted, url = await serve(script)
    pool = ConnectionPool(url, 1, True)
    with pytest.raises(aiohttp.ClientResponseError, match="response head over"):
        await send(pool)
    assert sum(sent) > MAX_HEAD_BYTES
    response, reused = await send(pool, limit=2**16)  # a fresh connection, not the broken one
    response.close()
    pool.close()
    assert scripted.connections == 2 and reused is False


async def test_a_large_body_read_with_the_head_is_not_taken_for_a_large_head(
    serve: Serve,
) -> None:
    body = b"x" * (2 * MAX_HEAD_BYTES)
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    _, url = await serve(keep_alive(lambda _: answer))
    pool = ConnectionPool(url, 1, True)
    response, _ = await send(pool, limit=4 * MAX_HEAD_BYTES)
    assert response.status == 200 and await response.read() == body
    response.release()
    pool.close()


async def test_a_slow_reader_stops_the_socket_being_read(serve: Serve) -> None:
    more = asyncio.Event()

    async def script(
        _: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n" + b"x" * 1000)
        await writer.drain()
        await more.wait()
        writer.write(b"y" * 2000)
        await writer.drain()

    _, url = await serve(script)
    pool = ConnectionPool(url, 1, True)
    response, _ = await send(pool, limit=1)  # paused above 2 buffered bytes
    conn = response.connection
    assert conn is not None
    await response.content._wait()  # the first bytes are in
    assert conn._paused
    more.set()
    got = await response.read()  # reading resumes the socket
    assert got == b"x" * 1000 + b"y" * 2000 and not conn._paused
    response.release()
    pool.close()


async def test_a_reader_never_holds_more_than_twice_its_limit_and_one_capped_read(
    serve: Serve,
) -> None:
    """A body far larger than the reader's limit, written at once: the socket is read in
    pieces of ``read_chunk_bytes``, so the pause holds the reader to twice its limit plus one
    piece, and capped reads (``readany(most)``) take it out in order, to the last byte."""
    limit = 16 * 1024
    body = bytes(range(256)) * 800  # 204,800 bytes

    async def script(
        _: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()

    _, url = await serve(script)
    pool = ConnectionPool(url, 1, True)
    response, _ = await send(pool, limit=limit)
    conn, content = response.connection, response.content
    piece = read_chunk_bytes(limit)
    assert piece == 4096 and conn is not None and len(conn.get_buffer(-1)) == piece
    got = bytearray()
    while data := await content.readany(limit):
        assert len(data) <= limit
        held = content.total_bytes - len(got) - len(data)
        assert held <= 2 * limit + piece, held
        got += data
    assert bytes(got) == body
    response.release()
    pool.close()


async def test_the_cap_makes_a_request_wait_for_a_free_connection(serve: Serve) -> None:
    server, url = await serve(
        keep_alive(lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d" % n)
    )
    pool = ConnectionPool(url, 1, True)
    first, _ = await send(pool)
    waiting = asyncio.ensure_future(send(pool))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert await first.read() == b"1"
    first.release()
    second, reused = await waiting
    assert reused and await second.read() == b"2"
    second.release()
    pool.close()
    assert server.connections == 1


async def test_closing_the_pool_fails_a_waiting_request_and_closes_its_sockets(
    serve: Serve,
) -> None:
    async def script(
        _: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.read()

    _, url = await serve(script)
    pool = ConnectionPool(url, 1, True)
    conn, _, _ = await pool.acquire(connect_s=60.0)
    response = conn.send(REQUEST, 2**16)
    waiting = asyncio.ensure_future(response.head())
    pool.close()
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await waiting
    assert conn.closed
    with pytest.raises(aiohttp.ClientConnectionError):
        await pool.acquire(connect_s=60.0)


def test_a_header_value_with_a_line_break_is_refused() -> None:
    assert header_block({"X-A": "1", "X-B": "two"}) == b"X-A: 1\r\nX-B: two\r\n"
    for bad in ("a\r\nX-Injected: 1", "a\nb", "a\x00"):
        with pytest.raises(ValueError):
            header_block({"X-A": bad})


async def test_a_response_released_before_its_terminator_goes_back_once_it_comes(
    serve: Serve,
) -> None:
    """An SSE stream ends at [DONE]; the chunked terminator may follow in a later packet."""
    go = asyncio.Event()

    async def script(
        server: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nDONE!\r\n")
            await writer.drain()
            await go.wait()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    scripted, url = await serve(script)
    pool = ConnectionPool(url, 1, True)  # one connection: the next request waits for it
    first, _ = await send(pool)
    assert await first.content.readany() == b"DONE!" and not first.complete
    first.release()
    waiting = asyncio.ensure_future(send(pool))
    go.set()
    second, reused = await waiting
    assert reused and scripted.connections == 1
    second.close()
    pool.close()


async def test_connections_send_without_delay(serve: Serve) -> None:
    _, url = await serve(keep_alive(lambda n: b"HTTP/1.1 204 No Content\r\n\r\n"))
    pool = ConnectionPool(url, 1, True)
    response, _ = await send(pool)
    conn = response.connection
    assert conn is not None and conn.transport is not None
    sock = conn.transport.get_extra_info("socket")
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    response.close()
    pool.close()


async def test_a_pooled_connection_closing_as_it_is_taken_is_retried_on_a_fresh_one(
    serve: Serve,
) -> None:
    """The stale retry also covers a connection whose close the loop has not delivered yet."""
    scripted, url = await serve(
        keep_alive(lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d" % n)
    )
    client = UpstreamClient(
        BackendConfig.model_validate(
            {"name": "b", "region": "r", "url": f"{url}/v1", "models": ["m"]}
        ),
        TimeoutsConfig(),
    )
    try:
        first = await client.post("/v1/x", b"{}", {}, ConnectionTiming())
        assert await first.read() == b"1"
        first.release()
        pool = client._pool
        assert pool is not None and len(pool._idle) == 1
        idle = pool._idle[-1].transport
        assert idle is not None
        idle.close()  # closing, connection_lost not yet run
        timing = ConnectionTiming()
        second = await client.post("/v1/x", b"{}", {"X-Request-Id": "r2"}, timing)
        assert await second.read() == b"2" and timing.reused is False
        second.release()
    finally:
        await client.close()
    assert scripted.connections == 2 and len(scripted.requests) == 2
    assert scripted.requests[1].startswith(b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nX-Request-Id: r2\r\nContent-Length: 2\r\n\r\n{}" in scripted.requests[1]
