"""One generation's life on the wire: submit to the engine, relay its events, clean up.

A client that goes away (aiohttp cancels the handler, or a write finds the socket reset) makes
the sequence leave the engine at once, whatever phase it is in, and counts as cancelled.

A request with ``n`` > 1 runs as n sequences of the one prompt, as vLLM runs parallel
sampling: each is its own sequence in the engine's batch (so it takes a batch slot and decodes
at the batch's pace), and the stream interleaves their chunks, each with its choice's index.
The engine's metrics count the request once (TTFT at its first token, success at its end) and
every generated token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.tokenizer import canonical_ids, id_block_hashes
from loadtests.emulator.engine import Event, EventKind, SequenceRequest
from loadtests.emulator.faults import FaultPlan
from loadtests.emulator.openai_format import Endpoint, ParsedRequest, ResponseIdentity
from loadtests.emulator.timing import FirstTokenPhases, server_timing, sse_comment
from loadtests.emulator.wire import Wire, WireFactory
from routing.prefix import block_hashes

if TYPE_CHECKING:
    from loadtests.emulator.server import EmulatedBackend

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


@dataclass(slots=True)
class GenerationContext:
    backend: EmulatedBackend
    parsed: ParsedRequest
    seq_ids: tuple[int, ...]  # one sequence a choice, in choice order
    max_tokens: int  # a choice's
    queue: asyncio.Queue[Event]  # every choice's events
    submitted_at: float
    identity: Wire
    choice_tokens: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    finished: int = 0  # choices that ended
    last_token_at: float = 0.0
    phases: FirstTokenPhases | None = None
    first_token_at: float = 0.0
    emit_lag_max_s: float = 0.0  # the emulator's own lateness against the engine's times
    emit_lag_sum_s: float = 0.0
    emitted: int = 0
    settled: bool = field(default=False)

    @classmethod
    def start(
        cls,
        backend: EmulatedBackend,
        parsed: ParsedRequest,
        plan: FaultPlan,
        wire: WireFactory | None = None,
        tool: str | None = None,
    ) -> GenerationContext:
        engine = backend.config.engine
        seq_ids = tuple(backend.next_seq_id() for _ in range(parsed.choices))
        max_tokens = parsed.max_tokens or engine.default_output_tokens
        hashes = block_hashes(parsed.canonical, tenant="default", block_tokens=engine.block_tokens)
        if backend.tokenizer is not None:  # the engine's own tokens, not bytes / 4
            ids = canonical_ids(backend.tokenizer, parsed.canonical)
            parsed = dataclasses.replace(parsed, prompt_tokens=max(len(ids), 1))
            hashes = id_block_hashes(ids, "default", engine.block_tokens)
        submitted_at = backend.driver.now()
        queue: asyncio.Queue[Event] = asyncio.Queue()
        for seq_id in seq_ids:
            request = SequenceRequest(
                seq_id, parsed.prompt_tokens, max_tokens, hashes,
                stall_s=plan.stall_s, drip_s=plan.drip_s, die_after_tokens=plan.die_after_tokens,
            )  # fmt: skip
            backend.driver.submit(request, queue)
        first = seq_ids[0]
        prefix = "chatcmpl" if parsed.endpoint is Endpoint.CHAT else "cmpl"
        identity: Wire = ResponseIdentity(
            f"{prefix}-{backend.config.name}-{first}", int(time.time()), parsed.model,
            parsed.endpoint, tool, max_tokens, parsed.choices,
        )  # fmt: skip
        if wire is not None:  # another API's wire format (loadtests/emulator/wires.py)
            identity = wire(f"{backend.config.name}-{first}", parsed.model, max_tokens)
        choice_tokens = [0] * len(seq_ids)
        return cls(
            backend, parsed, seq_ids, max_tokens, queue, submitted_at, identity, choice_tokens
        )

    @property
    def tokens(self) -> int:
        """Output tokens so far, every choice's."""
        return sum(self.choice_tokens)

    def choice_of(self, event: Event) -> int:
        # Sequence ids are consecutive (``start``); n is small, so no map is kept.
        return event.seq_id - self.seq_ids[0]

    @property
    def finish_reason(self) -> str:
        # An explicit max_tokens is generated in full (like ignore_eos); otherwise "EOS" came.
        return "length" if self.parsed.max_tokens is not None else "stop"

    async def events(self) -> AsyncIterator[Event]:
        """Engine events, each released when it would reach the client (half an RTT later)."""
        loop = asyncio.get_running_loop()
        half_rtt = self.backend.half_rtt_s
        while True:
            event = await self.queue.get()
            due = event.time + half_rtt
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            lag = loop.time() - due
            self.emit_lag_max_s = max(self.emit_lag_max_s, lag)
            self.emit_lag_sum_s += lag
            self.emitted += 1
            self._observe(event)
            yield event
            if event.kind is EventKind.FAILED:
                return
            if event.kind is EventKind.FINISHED:
                self.finished += 1
                if self.finished == len(self.seq_ids):
                    return

    def _observe(self, event: Event) -> None:
        metrics = self.backend.metrics
        model = self.parsed.model
        if event.kind is EventKind.FIRST_TOKEN:
            if self.phases is None:  # the request's first token, whichever choice has it
                self.phases = FirstTokenPhases.of(self.submitted_at, event)
                self.first_token_at = event.time
                metrics.ttft.labels(model).observe(event.time - self.submitted_at)
                metrics.prompt_tokens.labels(model).inc(self.parsed.prompt_tokens)
                self.cached_tokens = event.cached_tokens
        elif event.kind is EventKind.TOKEN:
            if event.time > self.last_token_at:  # a step's gap, not the choices of one step
                metrics.itl.labels(model).observe(event.time - self.last_token_at)
        elif event.kind is EventKind.FINISHED and self.finished + 1 == len(self.seq_ids):
            metrics.e2e.labels(model).observe(event.time - self.submitted_at)
            metrics.request_success.labels(model, self.finish_reason).inc()
        if event.kind in (EventKind.FIRST_TOKEN, EventKind.TOKEN):
            metrics.generation_tokens.labels(model).inc()
            self.choice_tokens[self.choice_of(event)] = event.tokens
            self.last_token_at = event.time

    def server_timing(self) -> str | None:
        """This request's engine phases (see ``timing.py``); None before its first token."""
        if self.phases is None:
            return None
        decode = self.last_token_at - self.first_token_at
        return server_timing(self.phases, decode, self.emit_lag_max_s)

    def completed(self) -> None:
        self.settled = True
        self.backend.stats.completed += 1
        if self.emitted:
            self.backend.metrics.emit_lag(self.emit_lag_max_s, self.emit_lag_sum_s, self.emitted)

    def failed(self, request: web.Request) -> None:
        """Injected death: drop the connection with no terminator, as a crashed engine would."""
        self.settled = True
        self.backend.stats.errors += 1
        drop_connection(request)

    def abandoned(self) -> None:
        if not self.settled:
            self.settled = True
            for seq_id in self.seq_ids:  # a choice that already finished is not in the engine
                self.backend.driver.cancel(seq_id)
            self.backend.stats.cancelled += 1


def drop_connection(request: web.Request) -> None:
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:  # linger 0: the close sends RST, not a polite FIN
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def respond_stream(request: web.Request, ctx: GenerationContext) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    identity = ctx.identity
    try:
        await asyncio.sleep(ctx.backend.half_rtt_s)
        await response.prepare(request)
        await response.write(identity.opening())
        async for event in ctx.events():
            if event.kind is EventKind.FAILED:
                ctx.failed(request)
                return response
            if event.kind is not EventKind.FINISHED:
                last = event.tokens >= ctx.max_tokens
                finish = ctx.finish_reason if last else None
                await response.write(identity.token(event.tokens - 1, finish, ctx.choice_of(event)))
        prompt, include_usage = ctx.parsed.prompt_tokens, ctx.parsed.include_usage
        await response.write(identity.closing(prompt, ctx.tokens, ctx.cached_tokens, include_usage))
        entries = ctx.server_timing()
        if entries is not None:
            await response.write(sse_comment(entries))
        await response.write(identity.terminal())
        ctx.completed()
        await response.write_eof()
        return response
    except (asyncio.CancelledError, ConnectionError):
        ctx.abandoned()
        raise


async def respond_complete(request: web.Request, ctx: GenerationContext) -> web.StreamResponse:
    try:
        async for event in ctx.events():
            if event.kind is EventKind.FAILED:
                ctx.failed(request)
                return web.Response(status=500)  # never sent: the connection is gone
        body = ctx.identity.whole(
            ctx.parsed.prompt_tokens, ctx.tokens, ctx.cached_tokens, ctx.finish_reason
        )
        ctx.completed()
        entries = ctx.server_timing()
        headers = {"Server-Timing": entries} if entries is not None else None
        return web.Response(body=body, content_type="application/json", headers=headers)
    except (asyncio.CancelledError, ConnectionError):
        ctx.abandoned()
        raise
