"""A load generator on bare connections, for overhead runs on a small host.

``run_bench`` drives requests through ``aiohttp.ClientSession``, ~0.55 ms of CPU per 16-token
stream here; on two cores that is CPU the server under test does not get, and its share grows
with the request rate. ``run_lean`` sends the same requests (the same ``Planner`` bodies) with
the same event semantics (``client._Stream``: token times, errors, usage, Meridian's final
comment) over one keep-alive ``asyncio.Protocol`` connection per user, the response parsed by
``httptools``; it returns the same ``BenchResult``. Single-turn workloads only (what the overhead benchmarks
run), closed loop or open loop (``run_bench``'s seeded Poisson arrivals).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast
from urllib.parse import urlsplit

import httptools
import orjson

from loadtests.bench.client import DETAIL_LIMIT, ROUTE_HEADER, _Stream, endpoint_url
from loadtests.bench.plan import Planner, SessionPlan, poisson_arrivals, request_body
from loadtests.bench.records import BenchResult, ErrorKind, RequestRecord
from loadtests.bench.runner import finished
from loadtests.bench.usage import token_counts
from loadtests.bench.workload import Workload

_TIMING_HEADER = b"server-timing"
_ROUTE_HEADER = ROUTE_HEADER.lower().encode()


class _Response(asyncio.Protocol):
    """One keep-alive connection; one request at a time (``send``, then await ``done``)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.stream = _Stream(keep_text=False)
        self.done: asyncio.Future[float] | None = None
        self.status: int | None = None
        self.headers: dict[bytes, str] = {}
        self._name = b""
        self._arrived = 0.0
        self.error_body: list[bytes] = []
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionResetError("the server closed the connection"))

    def send(self, request: bytes) -> asyncio.Future[float]:
        assert self.transport is not None
        self.stream = _Stream(keep_text=False)
        self.status, self.headers, self.error_body = None, {}, []
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.done

    def data_received(self, data: bytes) -> None:
        arrived = time.perf_counter()  # before parsing: the gap measured is the network's
        self._arrived = arrived
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            if self.done is not None and not self.done.done():
                self.done.set_exception(error)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._name = name.lower()
        if self._name in (_TIMING_HEADER, _ROUTE_HEADER):
            self.headers[self._name] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self.status is not None and self.status >= 300:
            self.error_body.append(body)
        else:
            self.stream.consume(self.stream.parser.feed(body), self._arrived)

    def on_message_complete(self) -> None:
        self.stream.consume(self.stream.parser.close(), time.perf_counter())
        if self.done is not None and not self.done.done():
            self.done.set_result(time.perf_counter())


async def run_lean(url: str, workload: Workload) -> BenchResult:
    """``workload`` (one turn per session) against ``url``; every request's record. Closed loop:
    ``concurrency`` users, each on its own connection. Open loop: sessions arrive as
    ``run_bench``'s seeded Poisson process at ``rate`` per second, each on an idle keep-alive
    connection (a new one when none is idle), so the server sees a fixed request rate whatever
    its latency."""
    arrival = workload.arrival
    lean = _Lean(url, workload)
    started_unix = time.time()
    if arrival.mode == "closed":
        await asyncio.gather(*(lean.user() for _ in range(arrival.concurrency or 1)))
    else:
        await lean.open_loop(arrival.rate or 1.0)
    lean.close_idle()
    return finished(url, workload, started_unix, lean.records)


class _Lean:
    """One run's state: the planner, the idle connections, the records (one event loop)."""

    def __init__(self, url: str, workload: Workload) -> None:
        parts = urlsplit(endpoint_url(url, "chat"))
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.workload = workload
        self.planner = Planner(workload)
        self.records: list[RequestRecord] = []
        self.limit = workload.limits.requests or 0
        self.started = 0
        self.idle: list[_Response] = []
        self.t0 = time.perf_counter()
        self.head = (
            f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        ).encode()

    async def user(self) -> None:
        """A closed-loop user: one request after another on one connection."""
        connection: _Response | None = None
        while self.started < self.limit:
            index = self.started
            self.started += 1
            connection = await self.exchange(index, connection, time.perf_counter())
        if connection is not None and connection.transport is not None:
            connection.transport.close()

    async def open_loop(self, rate: float) -> None:
        sessions: set[asyncio.Task[None]] = set()
        for index, offset in enumerate(poisson_arrivals(rate, self.workload.seed)):
            if index >= self.limit:
                break
            due = self.t0 + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            self.started += 1
            task = asyncio.create_task(self._arrival(index, due))
            sessions.add(task)
            task.add_done_callback(sessions.discard)
        await asyncio.gather(*sessions)

    async def _arrival(self, index: int, due: float) -> None:
        connection = await self.exchange(index, self.idle.pop() if self.idle else None, due)
        if connection is not None:
            self.idle.append(connection)

    def close_idle(self) -> None:
        for connection in self.idle:
            if connection.transport is not None:
                connection.transport.close()
        self.idle = []

    async def exchange(
        self, index: int, connection: _Response | None, scheduled: float
    ) -> _Response | None:
        """Request ``index`` on ``connection`` (a new one if None or lost); its record is
        appended. Returns the connection if it may carry another request."""
        workload = self.workload
        plan = self.planner.session(index)
        if plan.api != "chat" or len(plan.turns) != 1:
            raise ValueError("run_lean drives single-turn chat workloads only")
        body = request_body(plan, 0, [], workload.identity.tenant_in_user_field)
        payload = orjson.dumps(body)
        request = self.head + b"Content-Length: %d\r\n\r\n" % len(payload) + payload
        sent = time.perf_counter()
        try:
            if connection is None or connection.lost:
                loop = asyncio.get_running_loop()
                _, connection = await loop.create_connection(_Response, self.host, self.port)
            ended = await asyncio.wait_for(connection.send(request), workload.request_timeout_s)
            stream = connection.stream
        except (OSError, httptools.HttpParserError, TimeoutError) as error:
            stream = connection.stream if connection is not None else _Stream(False)
            kind = (
                ErrorKind.TIMEOUT
                if isinstance(error, TimeoutError)
                else (
                    ErrorKind.CONNECT
                    if connection is None or connection.status is None
                    else ErrorKind.STREAM_BROKEN
                )
            )
            stream.fail(kind, type(error).__name__)
            ended = time.perf_counter()
            if connection is not None and connection.transport is not None:
                connection.transport.close()
            connection = None
        offsets = (scheduled - self.t0, sent - self.t0)
        self.records.append(_record(index, plan, body, offsets, ended, sent, connection, stream))
        if connection is not None and not connection.parser.should_keep_alive():
            if connection.transport is not None:
                connection.transport.close()
            connection = None
        return connection


def _record(
    index: int,
    plan: SessionPlan,
    body: dict[str, Any],
    offsets: tuple[float, float],  # scheduled and sent, from the run's start
    ended: float,
    sent: float,
    connection: _Response | None,
    stream: _Stream,
) -> RequestRecord:
    """The record ``runner`` would make of the same exchange (same checks, same fields)."""
    status = connection.status if connection is not None else None
    headers = connection.headers if connection is not None else {}
    if status is not None and status >= 300 and connection is not None:
        text = b"".join(connection.error_body).decode(errors="replace")
        stream.fail(ErrorKind.HTTP_STATUS, text[:DETAIL_LIMIT])
    if stream.error is None and status is not None and not stream.done:
        stream.fail(ErrorKind.STREAM_BROKEN, "stream ended without [DONE] or a finish_reason")
    if stream.error is None and status is not None and not stream.token_times:
        stream.fail(ErrorKind.NO_TOKENS, "the stream completed without any token")
    token_times = tuple(t - sent for t in stream.token_times)
    counts = token_counts(body, stream.usage, len(token_times))
    return RequestRecord(
        index=index,
        session=plan.session,
        turn=0,
        component=plan.component,
        origin=plan.origin,
        tenant=plan.tenant,
        scheduled_s=offsets[0],
        sent_s=offsets[1],
        ttft_s=token_times[0] if token_times else None,
        e2e_s=ended - sent,
        token_times_s=token_times,
        prompt_tokens=counts.prompt,
        completion_tokens=counts.completion,
        cached_tokens=counts.cached,
        usage_reported=counts.from_usage,
        status=status,
        error=stream.error,
        error_detail=stream.detail,
        route=headers.get(_ROUTE_HEADER),
        server_timing=headers.get(_TIMING_HEADER),
        final_comment=stream.final_comment,
        max_tokens=plan.turns[0].max_tokens,
    )
