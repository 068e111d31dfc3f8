"""One upstream exchange after it produced its first token (or its whole non-streaming body).

:class:`UpstreamExchange` (bytes, events, timing) owns the upstream response until
:meth:`UpstreamExchange.close`; :class:`~gateway.opened_stream.OpenedStream` is the request's
bookkeeping around it (route, timing entries, predictions, what it holds). The exchange yields the
remaining SSE events with the inter-token timeout and the request deadline applied, keeps the
numbers the end-of-stream summary needs, and turns everything that can go wrong after the first
token — the upstream breaking, stalling, sending malformed SSE or an error event, the deadline,
the gateway draining — into :class:`StreamBroken`: never a silent end, never a retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from gateway.chain.hop_timing import take_timing_comment
from gateway.doors.grammar import OPENAI, Grammar, event_object
from gateway.errors import ApiError
from gateway.read_watch import ReadWatch
from gateway.scrub import scrub
from gateway.sse import SseEvent, SseSplitter
from gateway.timing import StreamStats, TimingEntry, parse
from gateway.upstream_response import UpstreamResponse

log = logging.getLogger("meridian.stream")

# A backend's own end-of-stream phases (the emulator sends them; vLLM-style engines cannot put
# them in headers, which go out before the first token).
_BACKEND_TIMING_COMMENT = b": server-timing "

if TYPE_CHECKING:
    from gateway.push_phase import Pusher, PushSink


class StreamBroken(Exception):
    """The stream failed after the client already got tokens; ``error`` is what it is told."""

    def __init__(self, kind: str, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.kind = kind
        self.error = ApiError(status, message, "server_error", kind)


class StreamAborted(Exception):
    """Put into an upstream response's reader to end its stream from outside (drain)."""

    def __init__(self, kind: str, message: str, status: int = 503) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


def is_malformed(event: SseEvent, obj: dict[str, Any] | None) -> bool:
    """A data event that is neither ``[DONE]`` nor a JSON object: no OpenAI server sends one."""
    return event.data is not None and obj is None and not event.is_done


def upstream_error(message: str) -> str:
    """The client's words for an upstream error event; the upstream's own (scrubbed) are
    logged only."""
    log.warning("upstream error event: %s", scrub(message))
    return "upstream sent an error mid-stream"


def event_carries_output(event: SseEvent) -> tuple[bool, dict[str, Any] | None]:
    """Whether a chat/completions event is the first token (content, text, tool call or a
    finish); other wire formats: :mod:`gateway.doors.grammar`."""
    return OPENAI.parse(event)


@dataclass(slots=True)
class UpstreamExchange:
    """One upstream response after its first token (or its whole non-streaming body): its
    bytes, its events and their timing. It owns the response until :meth:`close`."""

    response: UpstreamResponse
    stats: StreamStats
    grammar: Grammar = OPENAI  # the upstream's wire format (gateway/doors/grammar.py)
    inter_token_s: float = 60.0
    deadline: float | None = None  # perf_counter() time by which the whole request must end
    first_events: list[SseEvent] = field(default_factory=list)
    body: bytes | None = None  # a non-streaming response's whole body
    splitter: SseSplitter | None = None
    usage: dict[str, Any] | None = None
    saw_done: bool = False
    finished: bool = False
    consumed: int = 0  # upstream body bytes taken out of aiohttp's reader
    downstream_hops: list[dict[str, Any]] = field(default_factory=list)  # next gateway's timing
    backend_timing: list[TimingEntry] = field(default_factory=list)  # the backend's own phases
    ended_by: SseEvent | None = None  # the event that ended the stream ([DONE], message_stop)
    watch: ReadWatch | None = None  # the inter-token timer and deadline (gateway/read_watch.py)
    tick: Callable[[float], None] | None = None  # each read's arrival: routing's step clock
    keep_parsed: bool = False  # each checked event keeps its parsed object (AttemptContext)

    def note(self, event: SseEvent, obj: dict[str, Any] | None, carries: bool) -> None:
        ends = self.grammar.ends(event, obj)
        if carries and not ends:
            counted = obj is not None and self.grammar.counts_token(obj)
            self.stats.on_token_event(time.perf_counter(), counted, obj)
        if ends:
            self.saw_done = True
            self.ended_by = event
        usage = self.grammar.usage(obj) if obj is not None else None
        if usage is not None:
            self.usage = {**(self.usage or {}), **usage}

    async def all_events(self) -> AsyncIterator[SseEvent]:
        """Every event of the stream: those read with the first token, then the rest (one
        generator over :meth:`batches`, not two: each layer costs every event a resumption)."""
        for event in self.first_events:
            if not self._took_timing(event):
                yield event
        if not self.saw_done:
            async for batch in self.batches():
                for event in batch:
                    yield event

    def all_batches(self, push: Pusher | None = None) -> AsyncIterator[list[SseEvent]]:
        """Every event of the stream, grouped by the upstream read that brought them, so a
        door can hand one read's events to its transport in one write. With ``push``, what
        flows is written by it inside the upstream callback (``gateway/push_phase.py``) and
        only the rest is yielded; an empty batch then means: the client is behind, wait."""
        return self.batches(with_first=True, push=push)

    def _took_timing(self, event: SseEvent) -> bool:
        """End-of-stream timing from upstream — a downstream gateway's summary, or a backend's
        trailing ``: server-timing`` comment (its queue, prefill, decode) — is merged by
        :meth:`summary`, not relayed."""
        if event.data is not None:
            return False
        if event.raw.startswith(_BACKEND_TIMING_COMMENT):
            text = event.raw[len(_BACKEND_TIMING_COMMENT) :].decode(errors="replace").strip()
            self.backend_timing = parse(text)
            return True
        hops = take_timing_comment(event)
        if hops is None:
            return False
        self.downstream_hops = hops
        return True

    async def batches(
        self, *, with_first: bool = False, push: Pusher | None = None
    ) -> AsyncIterator[list[SseEvent]]:
        """The events after the first token (``with_first``: those read with it first), one
        list per upstream read, as they arrive; the events before a broken one are yielded
        before the error is raised. End-of-stream timing comments are taken, not yielded.
        ``push``: see :meth:`all_batches`."""
        if with_first:
            first = [event for event in self.first_events if not self._took_timing(event)]
            if first:
                yield first
            if self.saw_done:
                return
        splitter = self.splitter
        if splitter is None:  # only a streaming attempt's first read leaves one
            raise StreamBroken("internal_error", "the stream has no SSE reader", 500)
        sink: PushSink | None = None
        while not self.saw_done:
            if push is not None and push.ready():
                sink = sink or self._push_sink(splitter, push)
                await self._pushed(sink)
                if sink.held:  # the stream's last event: the door ends the stream
                    yield sink.held
                if sink.failure is not None:
                    raise sink.failure
                if self.saw_done:
                    return
                if sink.behind:
                    yield []
                    continue  # the client caught up: push again (or read what waited)
            chunk = await self._next_chunk()
            try:
                events = splitter.feed(chunk) if chunk else splitter.flush()
            except ValueError as exc:
                raise StreamBroken("upstream_malformed", str(exc)) from None
            batch: list[SseEvent] = []
            try:
                for event in events:
                    if event.data is None and self._took_timing(event):
                        continue  # a comment never ends, breaks or counts in any grammar
                    self.check(event, ended=not chunk)
                    batch.append(event)
            except StreamBroken:
                if batch:
                    yield batch
                raise
            if batch:
                yield batch
            if not chunk and not self.saw_done:
                raise StreamBroken("upstream_truncated", "upstream stream ended without [DONE]")

    def check(self, event: SseEvent, *, ended: bool) -> None:
        """Note one event, or raise what it breaks; most token events need no JSON walk. Every
        path takes events through it: the first read (gateway/attempt.py), the pulled batches
        and the push (gateway/push_phase.py)."""
        grammar, data = self.grammar, event.data
        plain = obj = None
        if data is not None and (obj := event_object(event)) is not None:  # its one parse
            if self.keep_parsed:  # for a door that builds from the object (event.parsed)
                event.parsed = obj
            plain = grammar.plain(obj, data)
        # No error, usage or finish: a token or nothing (the same answer). With n > 1 choices
        # a token's gap is its choice's: the full path hands the stats the chunk (as the push's).
        if plain is not None and self.stats.choice_last_at is None:
            if plain:  # StreamStats.on_token_event(now), inline: runs for every token event
                stats, now = self.stats, time.perf_counter()
                if stats.first_token_at is None:
                    stats.first_token_at = now
                if (last := stats.last_token_at) is not None:
                    stats.gaps_ms.append((now - last) * 1000.0)
                stats.last_token_at = now
                stats.output_events += 1
            return
        carries, obj = grammar.parse_object(event, obj)
        if is_malformed(event, obj):
            if ended:  # an unterminated last event that does not parse: cut short
                raise StreamBroken("upstream_truncated", "upstream stream ended mid-event")
            raise StreamBroken("upstream_malformed", "upstream sent a malformed data event")
        error = grammar.error(obj) if obj is not None else None
        if error is not None:
            raise StreamBroken("upstream_error_event", upstream_error(error))
        self.note(event, obj, carries)

    def _push_sink(self, splitter: SseSplitter, push: Pusher) -> PushSink:
        from gateway.push_phase import PushSink  # it imports StreamBroken from here

        return PushSink(self, splitter, push)

    async def _pushed(self, sink: PushSink) -> None:
        """Until the push stops (module doc of ``gateway/push_phase.py``); the ReadWatch
        counts the whole push as waiting for upstream, each read restarting the wait."""
        sink.reset()
        watch = self._watch()
        watch.reading()
        try:
            await self.response.content.push(sink)
        finally:
            watch.done()

    def _watch(self) -> ReadWatch:
        watch = self.watch
        if watch is None:  # one timer for the stream's life, not one per read
            watch = self.watch = ReadWatch(self.inter_token_s, self.deadline, self.abort)
        return watch

    async def _next_chunk(self) -> bytes:
        """The next upstream bytes (b"" at the end); every failure becomes StreamBroken."""
        watch = self.watch or self._watch()
        watch.reading()
        content = self.response.content
        try:  # at most a reader's limit per read: what one client write may add (sse_writer)
            chunk = await content.readany(content.limit)
        except StreamAborted as aborted:  # drained, stalled, past the deadline
            raise StreamBroken(aborted.kind, str(aborted), aborted.status) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise StreamBroken(
                "upstream_disconnected", f"upstream connection broke mid-stream: {exc!r}"
            ) from None
        finally:
            watch.done()
        self.consumed += len(chunk)
        if self.tick is not None and chunk:  # a step end, seen (gateway/step_feed.py)
            self.tick(time.monotonic())
        return chunk

    def abort(self, kind: str, message: str, status: int = 503) -> None:
        """End the stream from outside: the reader wakes with :class:`StreamAborted`."""
        if not self.finished and not self.saw_done and self.body is None:
            self.response.content.set_exception(StreamAborted(kind, message, status))

    def buffered_bytes(self) -> int:
        """Upstream bytes read from the socket but not yet relayed (aiohttp's reader + ours)."""
        pending = self.splitter.pending_bytes if self.splitter is not None else 0
        return pending + self.response.content.total_bytes - self.consumed

    def output_tokens(self) -> int:
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return int(self.usage["completion_tokens"])
        return self.stats.output_events

    def cached_tokens(self) -> int | None:
        details = (self.usage or {}).get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            return int(details["cached_tokens"])
        return None

    def close(self) -> None:
        """Drop the upstream connection unless the exchange completed cleanly."""
        if self.watch is not None:
            self.watch.stop()
        if self.finished:
            return
        self.finished = True
        if self.body is not None or self.saw_done:
            self.response.release()
        else:
            self.response.close()
