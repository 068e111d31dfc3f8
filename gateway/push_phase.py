"""The streaming phase in push mode: each upstream read relayed inside the connection's callback.

Pulled, every relayed event costs the handler task a wake: the body reader resolves a future,
the loop steps the task, and the door's coroutine, the exchange's batch generator and the
reader's ``readany`` all resume, only to hand the bytes to ``transport.write`` and suspend
again. At concurrency 1 that wake, on cold caches, is most of the gateway's CPU per event
(``docs/results/perf-issue16.md``). Pushed, the body reader hands each read to a
:class:`PushSink` from inside ``UpstreamConnection.buffer_updated`` (llhttp's ``on_body``):
split into events, check each (usage, error, malformed: ``UpstreamExchange.check``), frame
and write to the client's transport, all synchronously. The handler task sleeps on one future
for as long as the stream flows.

Only the steady state is pushed. Anything else stops the push and wakes the task, which goes
on in the pulled path with the code that always handled it:

- the event that ends the stream (``[DONE]``): handed back with the read's other events, so
  the door writes them with the summary and the terminator (``SseWriter.end`` awaits);
- an event that breaks the stream (malformed, an error event): the events before it are
  written, then the :class:`~gateway.stream.StreamBroken` is raised by the task;
- the client behind its mark (``write`` returned False): the task waits for it to drain as
  before; meanwhile the body reader buffers and pauses its socket as before, so the stream's
  memory bound holds unchanged;
- the end of the body, a broken connection, an abort from outside (the ReadWatch timers, the
  drain): the body reader detaches the sink itself, and the task's next read sees it.

A sink never raises into the connection's callback (llhttp would take it for unparsable bytes
and close the connection): what it meets is kept in ``failure`` and raised by the task.

Each read runs here on cold caches at low concurrency, so the sink does inline what would be
a Python call a read: the ReadWatch's restart (``ReadWatch.since``), and for a pass-through
codec the door's pusher and ``SseWriter.push`` (it frames the read's bytes as one HTTP/1.1
chunk and writes them to the client's transport itself: :class:`~gateway.sse_writer.RawOut`).
An encoding codec (and a test's recorder) goes through :meth:`Pusher.__call__`. For a
pass-through codec, a read that is one whole one-line data event with nothing pending before
it (an engine's usual read at low concurrency) is checked from its data bytes
(``Grammar.plain_data``) and written as it came: no splitter, no ``SseEvent``, no ``check``.
Any other read, and any event the byte pre-check cannot vouch for, goes the general way.
"""

from __future__ import annotations

from time import monotonic, perf_counter
from typing import TYPE_CHECKING, Protocol

from gateway.sse import SseEvent, SseSplitter
from gateway.stream import StreamBroken

if TYPE_CHECKING:
    from gateway.sse_writer import RawOut
    from gateway.stream import UpstreamExchange


class Pusher(Protocol):
    """The door's side: writes a read's events synchronously (an SSE door's transport)."""

    def ready(self) -> bool:
        """Whether events can be written synchronously now (the headers went out)."""
        ...

    def raw(self) -> RawOut | None:
        """Once ready, for a codec that writes the bytes as they came: the client's side, so
        the sink frames and writes each read itself; None: every read through ``__call__``."""
        ...

    def __call__(self, events: list[SseEvent]) -> bool:
        """Write ``events``; False when the client is now behind its mark (wait for it)."""
        ...


def _through_check(data: bytes) -> bool | None:
    return None  # not known from the bytes: the event goes through the splitter and check


class PushSink:
    """One stream's push-mode relay of upstream reads; reset before each push."""

    __slots__ = (
        "_check",
        "_exchange",
        "_out",
        "_plain",
        "_push",
        "_splitter",
        "_watch",
        "behind",
        "failure",
        "held",
    )

    def __init__(self, exchange: UpstreamExchange, splitter: SseSplitter, push: Pusher) -> None:
        self._exchange = exchange
        self._splitter = splitter
        self._push = push
        self._watch = exchange._watch()  # each read restarts its wait (since, inline)
        self._check = exchange.check
        # The byte pre-check, before any SseEvent. With n > 1 choices a token's gap is its
        # choice's (gateway/timing.py), which ``check`` reads: every read goes through it.
        per_choice = exchange.stats.choice_last_at is not None
        self._plain = _through_check if per_choice else exchange.grammar.plain_data
        self._out: RawOut | None = None  # set by reset(): the push is ready by then
        self.held: list[SseEvent] = []  # events handed back to the task (the stream's end)
        self.failure: BaseException | None = None  # raised by the task after ``held``
        self.behind = False  # the client is past its mark: the task waits for it

    def reset(self) -> None:
        self.held, self.failure, self.behind = [], None, False
        self._out = self._push.raw()

    def __call__(self, chunk: bytes) -> bool:
        """Relay one upstream read; False stops the push (the task takes over)."""
        exchange = self._exchange
        exchange.consumed += len(chunk)
        watch = self._watch
        watch.since = now = perf_counter()  # ReadWatch.reading, inline: the next read's wait
        if watch.parked:  # the deadline passed between reads: reading() fires it
            watch.reading()
        if exchange.tick is not None:  # a step end, seen (gateway/step_feed.py)
            exchange.tick(monotonic())
        out = self._out
        splitter = self._splitter
        if (  # an engine's usual read: one whole one-line data event, nothing pending before it
            out is not None
            and not splitter.partial
            and chunk[:5] == b"data:"
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk.endswith(b"\n\n")
            and b"\r" not in chunk
            and (plain := self._plain(chunk[6:-2] if chunk[5:6] == b" " else chunk[5:-2]))
            is not None
        ):
            # What the splitter and check would do with it, inline: the event is the read's
            # bytes, it needs no SseEvent, and a plain token only counts (no error, usage, end).
            if plain:
                exchange.stats.on_token_event(now)
            data = chunk
        else:
            try:
                events = splitter.feed(chunk)
            except ValueError as exc:
                self.failure = StreamBroken("upstream_malformed", str(exc))
                return False
            batch: list[SseEvent] = []
            check = self._check
            try:
                for event in events:
                    if event.data is None and exchange._took_timing(event):
                        continue  # a comment never ends, breaks or counts in any grammar
                    check(event, ended=False)
                    batch.append(event)
                    if exchange.saw_done:  # the door writes them with the summary, terminator
                        self.held = batch
                        return False
            except Exception as exc:  # StreamBroken; anything else is raised by the task too
                self.failure = exc
            if not batch:
                return self.failure is None
            if out is None:
                try:
                    if not self._push(batch):
                        self.behind = True
                        return False
                except Exception as exc:  # the client went away: that is the end
                    self.failure = exc
                    return False
                return self.failure is None
            data = batch[0].raw if len(batch) == 1 else b"".join([event.raw for event in batch])
        try:  # SseWriter.push, inline (the bytes as they came: one chunk, one write)
            transport = out.transport
            if transport.is_closing():
                raise ConnectionResetError("client connection closed")
            frame = b"%x\r\n%b\r\n" % (len(data), data)
            out.chunked.output_size += len(frame)
            transport.write(frame)
            queued = transport.get_write_buffer_size()
        except Exception as exc:  # the client went away: that, not a break, is the end
            self.failure = exc
            return False
        if queued:  # nothing queued (the usual write): the stream holds a partial event at most
            out.note_held(queued)
            if queued > out.high:
                self.behind = True
                return False
        return self.failure is None
