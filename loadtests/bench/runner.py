"""Drive a workload against an endpoint: the in-process API behind ``meridian bench``.

Open loop: sessions arrive as a seeded Poisson process at ``rate`` per second whatever the
server does (so an overloaded server shows up as growing latency, not as a slower client), and
each request records how late the client sent it (``sent_s - scheduled_s``: the generator's own
lag). Closed loop: ``concurrency`` sessions in flight, the next starting when one finishes.
Either way the run stops by itself: no request starts after the request limit or the duration;
requests already in flight finish (bounded by the request timeout).
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from typing import TextIO

import aiohttp

from loadtests.bench.client import Exchange, endpoint_url, stream_completion
from loadtests.bench.plan import Planner, SessionPlan, poisson_arrivals, request_body
from loadtests.bench.records import BenchResult, RequestRecord
from loadtests.bench.usage import token_counts
from loadtests.bench.workload import Workload

PROGRESS_INTERVAL_S = 0.5
LAG_PROBE_INTERVAL_S = 0.01


@dataclass(frozen=True)
class BenchOptions:
    max_connections: int | None = None  # default: the concurrency (closed) or 4096 (open)
    connect_timeout_s: float = 10.0
    progress: bool = False  # a one-line progress report on stderr while running
    progress_stream: TextIO | None = None  # default: sys.stderr


class _Run:
    """The mutable state of one run; owned by a single event loop, so no locks."""

    def __init__(self, url: str, workload: Workload, http: aiohttp.ClientSession) -> None:
        self.url = url
        self.workload = workload
        self.http = http
        self.planner = Planner(workload)
        self.records: list[RequestRecord] = []
        self.started = 0
        self.in_flight = 0
        self.errors = 0
        self.loop_lags: list[float] = []
        self.t0 = time.perf_counter()
        limit = workload.limits.duration_s
        self.deadline = None if limit is None else self.t0 + limit

    def may_start(self) -> bool:
        limit = self.workload.limits.requests
        if limit is not None and self.started >= limit:
            return False
        return self.deadline is None or time.perf_counter() < self.deadline

    async def run_session(self, plan: SessionPlan, scheduled: float) -> None:
        replies: list[str] = []
        identity = self.workload.identity
        headers = _identity_headers(self.workload, plan)
        url = endpoint_url(self.url, plan.api)
        last_turn = len(plan.turns) - 1
        for turn in range(len(plan.turns)):
            if turn > 0 and plan.think_time_s > 0:
                await asyncio.sleep(plan.think_time_s)
            if turn > 0:
                scheduled = time.perf_counter()
            if not self.may_start():
                return
            index = self.started
            self.started += 1
            body = request_body(plan, turn, replies, identity.tenant_in_user_field)
            self.in_flight += 1
            try:
                exchange = await stream_completion(
                    self.http, url, body, headers, keep_text=turn < last_turn
                )
            finally:
                self.in_flight -= 1
            self.records.append(self._record(index, plan, turn, body, scheduled, exchange))
            if exchange.error is not None:
                self.errors += 1
                return  # a user whose turn failed does not carry on the conversation
            replies.append(exchange.reply)

    def _record(
        self,
        index: int,
        plan: SessionPlan,
        turn: int,
        body: dict[str, object],
        scheduled: float,
        exchange: Exchange,
    ) -> RequestRecord:
        sent = exchange.sent
        token_times = tuple(t - sent for t in exchange.token_times)
        counts = token_counts(body, exchange.usage, len(token_times))
        return RequestRecord(
            index=index,
            session=plan.session,
            turn=turn,
            component=plan.component,
            origin=plan.origin,
            tenant=plan.tenant,
            scheduled_s=scheduled - self.t0,
            sent_s=sent - self.t0,
            ttft_s=token_times[0] if token_times else None,
            e2e_s=exchange.ended - sent,
            token_times_s=token_times,
            prompt_tokens=counts.prompt,
            completion_tokens=counts.completion,
            cached_tokens=counts.cached,
            usage_reported=counts.from_usage,
            status=exchange.status,
            error=exchange.error,
            error_detail=exchange.detail,
            route=exchange.route,
            server_timing=exchange.server_timing,
            final_comment=exchange.final_comment,
            max_tokens=plan.turns[turn].max_tokens,
        )

    async def closed_loop(self, concurrency: int, ramp_up_s: float) -> None:
        next_session = 0

        async def user(position: int) -> None:
            nonlocal next_session
            if ramp_up_s > 0:
                await asyncio.sleep(ramp_up_s * position / concurrency)
            while self.may_start():
                plan = self.planner.session(next_session)
                next_session += 1
                await self.run_session(plan, time.perf_counter())

        await asyncio.gather(*(user(position) for position in range(concurrency)))

    async def open_loop(self, rate: float) -> None:
        sessions: set[asyncio.Task[None]] = set()
        for index, offset in enumerate(poisson_arrivals(rate, self.workload.seed)):
            due = self.t0 + offset
            if self.deadline is not None and due >= self.deadline:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if not self.may_start():
                break
            task = asyncio.create_task(self.run_session(self.planner.session(index), due))
            sessions.add(task)
            task.add_done_callback(sessions.discard)
        await asyncio.gather(*sessions)

    def progress_line(self) -> str:
        elapsed = time.perf_counter() - self.t0
        done = len(self.records)
        limit = self.workload.limits.requests
        total = f"/{limit}" if limit is not None else ""
        return (
            f"bench {elapsed:6.1f}s  done {done}{total}  in-flight {self.in_flight}  "
            f"errors {self.errors}  {done / elapsed if elapsed > 0 else 0.0:7.1f} req/s"
        )


def _identity_headers(workload: Workload, plan: SessionPlan) -> dict[str, str]:
    identity = workload.identity
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if identity.origin_header:
        headers[identity.origin_header] = plan.origin
    if identity.forwarded_for and plan.address:
        headers["X-Forwarded-For"] = plan.address
    if identity.tenant_header:
        headers[identity.tenant_header] = plan.tenant
    return headers


async def _probe_loop_lag(run: _Run) -> None:
    """How late a 10 ms timer fires: when the client's own loop is busy (or the machine is),
    every timestamp it takes is late by about this much, so the report shows it."""
    clock = time.perf_counter
    while True:
        before = clock()
        await asyncio.sleep(LAG_PROBE_INTERVAL_S)
        run.loop_lags.append(max(0.0, clock() - before - LAG_PROBE_INTERVAL_S))


async def _report_progress(run: _Run, stream: TextIO) -> None:
    interactive = stream.isatty()
    last_line = 0.0
    while True:
        await asyncio.sleep(PROGRESS_INTERVAL_S)
        if interactive:
            stream.write("\r" + run.progress_line())
        elif time.perf_counter() - last_line >= 5.0:  # a log file gets a line every 5 s
            stream.write(run.progress_line() + "\n")
            last_line = time.perf_counter()
        stream.flush()


async def run_bench(
    url: str, workload: Workload, options: BenchOptions | None = None
) -> BenchResult:
    """Run ``workload`` against the OpenAI-compatible server at ``url`` (base URL, with or
    without ``/v1``) and return every request's record. Never raises for server errors: they
    are in the records."""
    options = options or BenchOptions()
    arrival = workload.arrival
    default_limit = arrival.concurrency if arrival.mode == "closed" else 4096
    connector = aiohttp.TCPConnector(limit=options.max_connections or default_limit or 100)
    timeout = aiohttp.ClientTimeout(
        total=workload.request_timeout_s, sock_connect=options.connect_timeout_s
    )
    started_unix = time.time()
    # SSE is not compressed in practice; skipping the decompression layer saves a call a chunk.
    session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
    async with session as http:
        run = _Run(url, workload, http)
        stream = options.progress_stream or sys.stderr
        progress = asyncio.create_task(_report_progress(run, stream)) if options.progress else None
        lag_probe = asyncio.create_task(_probe_loop_lag(run))
        try:
            if arrival.mode == "closed":
                await run.closed_loop(arrival.concurrency or 1, arrival.ramp_up_s)
            else:
                await run.open_loop(arrival.rate or 1.0)
        finally:
            lag_probe.cancel()
            await asyncio.gather(lag_probe, return_exceptions=True)
            if progress is not None:
                progress.cancel()
                await asyncio.gather(progress, return_exceptions=True)
                stream.write(("\r" if stream.isatty() else "") + run.progress_line() + "\n")
    return finished(url, workload, started_unix, run.records, tuple(run.loop_lags))


def finished(
    url: str,
    workload: Workload,
    started_unix: float,
    records: list[RequestRecord],
    loop_lag_s: tuple[float, ...] = (),
) -> BenchResult:
    """A run's result: its records in start order, timed from the first send to the last end."""
    ordered = tuple(sorted(records, key=lambda r: r.index))
    last_end = max((r.sent_s + (r.e2e_s or 0.0) for r in ordered), default=0.0)
    return BenchResult(
        url=url,
        workload=workload.name,
        mode=workload.arrival.mode,
        seed=workload.seed,
        started_unix=started_unix,
        duration_s=last_end,
        records=ordered,
        loop_lag_s=loop_lag_s,
    )
