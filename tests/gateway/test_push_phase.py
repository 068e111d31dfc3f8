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
from typing import cast

import pytest
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_writer import StreamWriter
from yarl import URL

from gateway.http_client import ConnectionPool
from gateway.sse import SseEvent, SseSplitter
from gateway.sse_writer import RawOut
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


class Wire(asyncio.Transport):
    """The client's transport under a raw push: what the sink framed and wrote itself."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.frames.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


class RawPusher:
    """A pass-through door's pusher: the sink frames and writes each read itself."""

    def __init__(self) -> None:
        self.wire = Wire()
        self.chunked = StreamWriter(cast(BaseProtocol, None), asyncio.get_running_loop())

    def ready(self) -> bool:
        return True

    def raw(self) -> RawOut:
        return RawOut(self.wire, self.chunked, 1 << 20, lambda queued: None)

    def __call__(self, events: list[SseEvent]) -> bool:
        raise AssertionError("a raw push writes through its RawOut")

    def written(self) -> list[bytes]:
        """What each frame carried (one HTTP/1.1 chunk per read)."""
        out = []
        for frame in self.wire.frames:
            size, _, rest = frame.partition(b"\r\n")
            assert rest.endswith(b"\r\n") and len(rest) == int(size, 16) + 2
            out.append(rest[:-2])
        return out


ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}}\n\n'
# Reads an engine's stream may bring: the one-event shape the sink relays without an SseEvent,
# and beside it every shape that needs the splitter or the full check.
READS = [
    TOKEN,
    ROLE,  # the one-event shape, not a token
    b'data:{"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n',  # no space after the colon
    b'data: {"choices":[{"index":0,"delta":{"content":"s"',  # half an event
    b"}}]}\n\n" + TOKEN,  # its end, then a whole one: the splitter held bytes before
    TOKEN,
    TOKEN + TOKEN,
    b'data: {"choices":[{"delta":{"content":"c"}}]}\r\n\r\n',  # CRLF line ends
    b": keepalive\n\n",
    b'event: x\ndata: {"choices":[{"delta":{"content":"e"}}]}\n\n',
    b'data: {"choices":[{"delta":\ndata: {"content":"m"}}]}\n\n',  # two data lines
    b'data: {"choices":[{"delta":{"content":"r"}}]}\r\n\n',  # a CR: the splitter's line end
    b"event: delta\n",  # a field line: the event's start...
    TOKEN,  # ...so this read, alone one whole event, is its end
    b'data: {"choices":[{"delta":{"content":"q"}}]}\n:',  # one line and a byte of the next
    b" comment\n\n",
    b'note:{"choices":[{"delta":{"content":"n"}}]}\n\n',  # no data field: not a token
    USAGE,
    FINISH,
    DONE,
]


async def relay_reads(
    upstream: tuple[URL, Sends], reads: list[bytes], pusher: RawPusher | None
) -> tuple[UpstreamExchange, list[list[bytes]], str | None]:
    """Each read sent once the relay took the one before; what the door's loop was yielded,
    and how the stream broke (None: it ended)."""
    _, sends = upstream
    exchange = await opened(upstream)
    yielded: list[list[bytes]] = []

    async def run() -> None:
        async for batch in exchange.all_batches(pusher):
            yielded.append([event.raw for event in batch])

    relay = asyncio.ensure_future(run())
    sent = 0
    for data in reads:
        sends.put_nowait(data)
        sent += len(data)
        await until(lambda sent=sent: exchange.consumed == sent or relay.done())  # type: ignore[misc]
    broken: str | None = None
    try:
        await relay
    except StreamBroken as exc:
        broken = exc.kind
    exchange.close()
    return exchange, yielded, broken


def tallies(exchange: UpstreamExchange) -> tuple[object, ...]:
    stats = exchange.stats
    return stats.output_events, len(stats.gaps_ms), exchange.usage, exchange.saw_done


async def test_a_raw_push_writes_and_counts_what_the_pulled_path_yields_and_counts(
    upstream: tuple[URL, Sends],
) -> None:
    _, sends = upstream
    pulled, batches, pulled_break = await relay_reads(upstream, READS, None)
    sends.put_nowait(None)  # the first connection's script ends before the second begins
    await until(sends.empty)
    pusher = RawPusher()
    pushed, yielded, pushed_break = await relay_reads(upstream, READS, pusher)
    assert pulled_break is pushed_break is None
    assert [b"".join(batch) for batch in batches] == pusher.written() + [
        b"".join(batch) for batch in yielded
    ]
    assert yielded == [[DONE]]  # the end comes to the task, which writes the summary
    assert tallies(pushed) == tallies(pulled) == (13, 12, USAGE_SEEN, True)
    assert pushed.consumed == pushed.response.content.total_bytes


USAGE_SEEN = {"prompt_tokens": 5, "completion_tokens": 9}


@pytest.mark.parametrize(
    ("event", "kind"),
    [
        (b"data: {not json}\n\n", "upstream_malformed"),
        (b'data: {"choices":5}\n\n', "upstream_malformed"),
        (
            b'data: {"choices":[{"delta":{"content":"x","tool_calls":[1]}}]}\n\n',
            "upstream_malformed",
        ),
        (b'data: {"error":{"message":"engine OOM"}}\n\n', "upstream_error_event"),
        (b'data:x{"choices":[{"delta":{"content":"x"}}]}\n\n', "upstream_malformed"),
        # JSON only across its two lines; the second is no data field, so the event's is not
        (b'data: {"choices":[{"delta":{"content":"x"}}]\n}\n\n', "upstream_malformed"),
    ],
)
async def test_a_raw_push_breaks_on_a_one_event_read_as_the_pulled_path_does(
    upstream: tuple[URL, Sends], event: bytes, kind: str
) -> None:
    pusher = RawPusher()
    _, yielded, broken = await relay_reads(upstream, [TOKEN, event, TOKEN], pusher)
    assert broken == kind
    assert pusher.written() == [TOKEN]  # nothing of the broken event, nothing after it
    assert yielded == []
