"""The relay's per-event work: one timer per stream (gateway/read_watch.py) and one batch per
upstream read (``UpstreamExchange.batches``), over real loopback sockets and a real event loop.

Every wait here is for an event (the timer's callback, the server's bytes); no assertion
depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest
from yarl import URL

from gateway.http_client import ConnectionPool
from gateway.lag_timeout import LATE_S
from gateway.read_watch import ReadWatch
from gateway.sse import SseSplitter
from gateway.stream import StreamBroken, UpstreamExchange
from gateway.timing import StreamStats
from tests.held_loop import hold_until
from tests.servers import settle

Expired = asyncio.Queue[tuple[str, int]]


def watch_for(idle_s: float, deadline: float | None) -> tuple[ReadWatch, Expired]:
    expired: Expired = asyncio.Queue()
    watch = ReadWatch(
        idle_s, deadline, lambda kind, _msg, status: expired.put_nowait((kind, status))
    )
    return watch, expired


async def test_a_read_that_waits_past_the_idle_bound_is_stalled() -> None:
    watch, expired = watch_for(0.02, None)
    watch.reading()
    assert await expired.get() == ("upstream_stalled", 502)


async def test_time_between_reads_never_counts_as_a_stall() -> None:
    watch, expired = watch_for(0.01, None)
    watch.reading()
    watch.done()  # the relay now waits for a slow client, not for upstream
    await asyncio.sleep(0.05)  # several idle bounds pass: the timer re-arms, never fires
    assert expired.empty()
    watch.reading()  # the next read is bounded from its own start
    assert await expired.get() == ("upstream_stalled", 502)


async def test_an_idle_bound_the_busy_loop_let_pass_is_no_stall() -> None:
    """Upstream's bytes come within the bound, but the loop is held past it
    (gateway/lag_timeout.py): the check that then runs late, before the read is woken, gives
    the loop its lag back, and the read returns. Read, send and hold are one step of this
    task, so no timer can run between them."""
    watch, expired = watch_for(0.02, None)
    upstream, ours = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    watch.reading()  # as the relay's read of upstream begins
    upstream.send(b"x")
    hold_until(time.monotonic() + 0.02 + LATE_S + 0.05)  # the loop is busy meanwhile
    assert await reader.readexactly(1) == b"x"
    watch.done()
    assert expired.empty()
    watch.reading()  # on a free loop, a read that gets nothing is stalled all the same
    assert await expired.get() == ("upstream_stalled", 502)
    watch.stop()
    writer.close()
    await writer.wait_closed()
    upstream.close()


async def test_the_deadline_ends_a_read_before_the_idle_bound() -> None:
    watch, expired = watch_for(60.0, time.perf_counter() + 0.02)
    watch.reading()
    assert await expired.get() == ("deadline_exceeded", 504)


async def test_a_deadline_that_passed_between_reads_ends_the_next_read() -> None:
    watch, expired = watch_for(60.0, time.perf_counter() + 0.01)
    await asyncio.sleep(0.03)  # past the deadline, not reading: the timer parks
    assert expired.empty()
    watch.reading()
    assert await expired.get() == ("deadline_exceeded", 504)


async def test_a_stopped_watch_never_fires() -> None:
    watch, expired = watch_for(0.01, time.perf_counter() + 0.01)
    watch.stop()
    watch.reading()
    await asyncio.sleep(0.03)
    assert expired.empty()


TOKEN = b'data: {"choices":[{"index":0,"delta":{"content":"t"},"finish_reason":null}]}\n\n'
FINISH = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
DONE = b"data: [DONE]\n\n"


@pytest.fixture
async def one_write_upstream() -> AsyncIterator[tuple[str, list[bytes]]]:
    """An HTTP server that answers with headers and the whole scripted body in one send()."""
    body: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        writer.write(head + b"".join(body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/", body
    server.close()
    await server.wait_closed()


async def opened_stream(url: str) -> UpstreamExchange:
    """The upstream exchange an attempt hands over after its first read (the relay's own
    client; this server's body runs to the connection's close)."""
    conn, _, _ = await ConnectionPool(URL(url), 1, True).acquire(connect_s=60.0)
    response = conn.send(b"GET / HTTP/1.1\r\nHost: upstream\r\n\r\n", 2**16)
    await response.head()
    return UpstreamExchange(
        response=response,
        stats=StreamStats(started_at=time.perf_counter()),
        splitter=SseSplitter(),
    )


async def test_the_events_of_one_upstream_read_come_as_one_batch(
    one_write_upstream: tuple[str, list[bytes]],
) -> None:
    url, body = one_write_upstream
    body[:] = [TOKEN, TOKEN, b": comment\n\n", TOKEN, FINISH, DONE]
    opened = await opened_stream(url)
    try:
        batches = [batch async for batch in opened.all_batches()]
    finally:
        opened.close()
    assert [[event.raw for event in batch] for batch in batches] == [body]
    assert opened.stats.output_events == 3  # tokens via the fast path, the finish is not one
    assert opened.saw_done and opened.ended_by is batches[0][-1]


async def test_events_before_a_broken_one_are_relayed_before_the_error(
    one_write_upstream: tuple[str, list[bytes]],
) -> None:
    url, body = one_write_upstream
    body[:] = [TOKEN, TOKEN, b'data: {"error": {"message": "engine OOM"}}\n\n', TOKEN, DONE]
    got: list[bytes] = []
    opened = await opened_stream(url)
    with pytest.raises(StreamBroken) as broken:
        async for event in opened.all_events():
            got.append(event.raw)
    opened.close()
    assert got == [TOKEN, TOKEN]
    assert broken.value.kind == "upstream_error_event"


async def test_a_watch_says_it_is_parked_past_the_deadline_and_the_next_read_fires_it() -> None:
    """The push sink restarts a read by setting ``since`` and calls ``reading()`` only when
    the watch is ``parked``: that flag must be true exactly while no timer is armed."""
    watch, expired = watch_for(60.0, time.perf_counter() + 0.01)
    assert not watch.parked  # armed for the deadline
    await settle(lambda: watch.parked)  # the timer fired between reads and parked
    assert expired.empty()
    watch.since = time.perf_counter()  # what the sink does per read, then:
    assert watch.parked
    watch.reading()
    assert await expired.get() == ("deadline_exceeded", 504)
    watch.stop()
    assert not watch.parked
