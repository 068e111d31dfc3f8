"""The push-mode streaming phase (gateway/push_phase.py) over a real loopback socket.

The upstream here sends what the test puts in its queue, one send per item, so every read the
relay gets is known. What flows is written inside the connection's callback — no task is
running when the pusher is called — and only the stream's edges reach the task. Every wait is
for an event (the pusher's record, the server's queue, the timer's callback).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from yarl import URL

from gateway.http_client import ConnectionPool
from gateway.sse import SseEvent, SseSplitter
from gateway.stream import StreamBroken, UpstreamExchange
from gateway.timing import StreamStats
from tests.gateway.scripted_upstream import Scripted, send
from tests.observability.support import until

TOKEN = b'data: {"choices":[{"index":0,"delta":{"content":"t"},"finish_reason":null}]}\n\n'
FINISH = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
ERROR = b'data: {"error": {"message": "engine OOM"}}\n\n'
DONE = b"data: [DONE]\n\n"

Sends = asyncio.Queue[bytes | None]  # None: close the connection


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[URL, Sends]]:
    """An HTTP server that sends what the test queues (the head first), one send each."""
    sends: Sends = asyncio.Queue()

    async def script(
        server: Scripted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        while (data := await sends.get()) is not None:
            writer.write(data)
            await writer.drain()

    server = Scripted(script)
    url = await server.start()
    yield url, sends
    sends.put_nowait(None)  # a script still sending ends (the relay may have closed first)
    assert server.server is not None
    server.server.close()
    await server.server.wait_closed()


class Recorder:
    """A pusher that records what it was given and whether a task was running then."""

    def __init__(self, behind_at: int | None = None) -> None:
        self.writes: list[list[bytes]] = []
        self.in_task: list[bool] = []
        self.behind_at = behind_at  # the write after which the client is "behind", once
        self.arrived = asyncio.Event()

    def ready(self) -> bool:
        return True

    def raw(self) -> None:
        return None  # every read through __call__, recorded

    def __call__(self, events: list[SseEvent]) -> bool:
        self.writes.append([event.raw for event in events])
        self.in_task.append(asyncio.current_task() is not None)
        self.arrived.set()
        if self.behind_at is not None and len(self.writes) == self.behind_at:
            self.behind_at = None
            return False
        return True

    async def wait_for(self, writes: int) -> None:
        while len(self.writes) < writes:
            self.arrived.clear()
            await self.arrived.wait()


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


async def opened(
    upstream: tuple[URL, Sends], inter_token_s: float = 60.0, *, chunked: bool = False
) -> UpstreamExchange:
    url, sends = upstream
    sends.put_nowait(HEAD + (b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"\r\n"))
    response, _ = await send(ConnectionPool(url, 1, True))
    return UpstreamExchange(
        response=response,
        stats=StreamStats(started_at=time.perf_counter()),
        splitter=SseSplitter(),
        inter_token_s=inter_token_s,
    )


async def broken_kind(relay: asyncio.Future[None], exchange: UpstreamExchange) -> str:
    """How the relay ended: it must be a :class:`StreamBroken`."""
    with pytest.raises(StreamBroken) as broken:
        await relay
    exchange.close()
    return broken.value.kind


def relayed(
    exchange: UpstreamExchange, pusher: Recorder
) -> tuple[asyncio.Future[None], list[list[bytes]]]:
    """The door's loop as a task: what the pushed relay yields to it (its edges) is kept."""
    yielded: list[list[bytes]] = []

    async def run() -> None:
        async for batch in exchange.all_batches(pusher):
            yielded.append([event.raw for event in batch])

    return asyncio.ensure_future(run()), yielded


async def test_flowing_events_are_written_in_the_upstream_callback_not_by_the_task(
    upstream: tuple[URL, Sends],
) -> None:
    _, sends = upstream
    exchange = await opened(upstream)
    pusher = Recorder()
    relay, yielded = relayed(exchange, pusher)
    try:
        for n in range(1, 6):  # one read at a time: each is pushed before the next is sent
            sends.put_nowait(TOKEN)
            await pusher.wait_for(n)
        sends.put_nowait(TOKEN + b": comment\n\n" + TOKEN)  # one read, two events, one write
        await pusher.wait_for(6)
        sends.put_nowait(FINISH + DONE)
        await relay
    finally:
        exchange.close()
    assert pusher.writes == [[TOKEN]] * 5 + [[TOKEN, b": comment\n\n", TOKEN]]
    assert pusher.in_task == [False] * 6  # inside buffer_updated: no task woke for them
    assert yielded == [[FINISH, DONE]]  # the end comes to the task, which writes the summary
    assert exchange.stats.output_events == 7
    assert exchange.saw_done and exchange.consumed == exchange.response.content.total_bytes


async def test_a_client_behind_its_mark_stops_the_push_until_the_task_resumes_it(
    upstream: tuple[URL, Sends],
) -> None:
    _, sends = upstream
    exchange = await opened(upstream)
    pusher = Recorder(behind_at=2)
    batches = exchange.all_batches(pusher)
    first = asyncio.ensure_future(anext(batches))
    sends.put_nowait(TOKEN)
    await pusher.wait_for(1)
    sends.put_nowait(TOKEN)
    assert await first == []  # after the 2nd write: the door waits for its client
    assert not exchange.response.content.pushing  # meanwhile the reader buffers (and pauses)
    last = asyncio.ensure_future(anext(batches))  # the door came back: pushing again
    await pushing(exchange)
    sends.put_nowait(TOKEN)
    await pusher.wait_for(3)
    sends.put_nowait(DONE)
    assert [event.raw for event in await last] == [DONE]
    exchange.close()
    assert pusher.writes == [[TOKEN], [TOKEN], [TOKEN]]


ENDINGS = ["upstream_error_event", "upstream_stalled", "gateway_draining", "upstream_truncated"]


@pytest.mark.parametrize("kind", ENDINGS)
async def test_a_push_ends_on_a_break_a_stall_an_abort_or_a_close_as_the_pulled_path_does(
    upstream: tuple[URL, Sends], kind: str
) -> None:
    _, sends = upstream
    stalls = kind == "upstream_stalled"
    exchange = await opened(upstream, inter_token_s=0.05 if stalls else 60.0)
    pusher = Recorder()
    relay, yielded = relayed(exchange, pusher)
    if not stalls:  # (a stall: nothing comes; the ReadWatch fires while the push waits)
        sends.put_nowait(TOKEN)
        await pusher.wait_for(1)  # pushing: the task sleeps on the reader's one future
    if kind == "gateway_draining":
        exchange.abort(kind, "the gateway is shutting down; stream ended")
    elif kind == "upstream_truncated":
        sends.put_nowait(None)  # the body ends (with the connection) without [DONE]
    elif kind == "upstream_error_event":  # the events before it are written, then it breaks
        sends.put_nowait(TOKEN + ERROR + TOKEN)
    assert await broken_kind(relay, exchange) == kind
    assert pusher.writes == {"upstream_stalled": [], "upstream_error_event": [[TOKEN]] * 2}.get(
        kind, [[TOKEN]]
    )
    assert yielded == []


async def test_bytes_that_arrived_before_the_push_began_are_read_first(
    upstream: tuple[URL, Sends],
) -> None:
    _, sends = upstream
    exchange = await opened(upstream)
    sends.put_nowait(TOKEN + TOKEN)
    await until(lambda: exchange.response.content.total_bytes == 2 * len(TOKEN))  # buffered
    pusher = Recorder()
    relay, yielded = relayed(exchange, pusher)
    await pushing(exchange)
    sends.put_nowait(TOKEN)
    await pusher.wait_for(1)
    sends.put_nowait(DONE)
    await relay
    exchange.close()
    assert yielded == [[TOKEN, TOKEN], [DONE]]  # pulled (it waited), then pushed, then the end
    assert pusher.writes == [[TOKEN]]


async def pushing(exchange: UpstreamExchange) -> None:
    """Until the relay task installed its sink (it runs up to its wait in one step)."""
    await until(lambda: exchange.response.content.pushing)


async def test_the_chunks_of_one_read_are_relayed_in_one_write(
    upstream: tuple[URL, Sends],
) -> None:
    _, sends = upstream
    exchange = await opened(upstream, chunked=True)
    pusher = Recorder()
    relay, yielded = relayed(exchange, pusher)
    sends.put_nowait(chunk(TOKEN))
    await pusher.wait_for(1)
    sends.put_nowait(chunk(TOKEN) + chunk(TOKEN) + chunk(TOKEN))  # one send: one read, here
    await pusher.wait_for(2)
    sends.put_nowait(chunk(DONE) + b"0\r\n\r\n")
    await relay
    exchange.close()
    assert pusher.writes == [[TOKEN], [TOKEN] * 3]  # llhttp's three on_body calls, one write
    assert yielded == [[DONE]]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)
