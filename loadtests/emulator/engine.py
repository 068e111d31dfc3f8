"""A serving engine's timing model, pure and clock-injected.

Continuous batching in discrete engine steps, as vLLM v1 schedules them: each step has a token
budget; every decoding sequence takes one token of it, prefilling sequences take chunks of what
is left (chunked prefill, FIFO), and waiting sequences are admitted while batch slots and budget
remain. A step lasts ``decode_base + decode_per_seq x decoding`` (decode is memory-bound, so a
bigger batch is slower per token) plus ``prefill tokens / prefill rate``; every sequence in the
step gets its token at the step's end. A long prompt therefore delays the first token of everyone
queued behind it and stretches the inter-token gaps of everyone decoding beside it.

Nothing here reads a clock: callers pass ``now`` (seconds, any monotonic origin), then call
:meth:`Engine.advance` at or after :meth:`Engine.next_event_time`. The real-time server and a
discrete-event simulator drive the same class.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from enum import StrEnum

from loadtests.emulator.config import EngineParams
from loadtests.emulator.prefix_cache import PrefixCache


class EventKind(StrEnum):
    FIRST_TOKEN = "first_token"
    TOKEN = "token"
    FINISHED = "finished"  # follows the last token, same time
    FAILED = "failed"  # injected death mid-stream: the connection should drop


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    seq_id: int
    time: float
    tokens: int  # output tokens generated so far
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class SequenceRequest:
    seq_id: int
    prompt_tokens: int
    max_tokens: int
    block_hashes: tuple[int, ...] = ()
    stall_s: float = 0.0  # fault: extra wait before the sequence may be scheduled
    drip_s: float = 0.0  # fault: extra gap between this sequence's tokens
    die_after_tokens: int | None = None  # fault: fail after this many tokens


@dataclass(frozen=True, slots=True)
class EngineCounters:
    running: int
    waiting: int
    kv_cache_usage: float
    prefix_queries_tokens: int
    prefix_hits_tokens: int
    cold: bool


@dataclass(slots=True)
class _Sequence:
    request: SequenceRequest
    eligible_at: float
    prefill_left: int = 0
    generated: int = 0
    cached_tokens: int = 0
    not_before: float = 0.0


@dataclass(frozen=True, slots=True)
class _Step:
    start: float
    end: float
    prefill: tuple[tuple[int, int], ...]  # (seq_id, chunk tokens)
    decode: tuple[int, ...]


class Engine:
    def __init__(self, params: EngineParams, now: float = 0.0) -> None:
        self.params = params
        self._start_empty(now)

    def _start_empty(self, now: float) -> None:
        params = self.params
        self._cache = PrefixCache(params.kv_cache_blocks)
        self._pending: dict[int, _Sequence] = {}  # paying overhead / stall / cold start
        self._pending_heap: list[tuple[float, int, int]] = []  # (eligible_at, order, seq_id)
        self._waiting: dict[int, _Sequence] = {}  # FIFO by insertion
        self._running: dict[int, _Sequence] = {}  # admission order
        self._step: _Step | None = None
        self._free_at = now
        self._now = now
        self._order = 0
        # Serverless engines start scaled to zero; dedicated ones are always warm.
        self._last_active = -math.inf if params.idle_timeout_s is not None else now
        self._warm_at = -math.inf
        self._outbox: list[Event] = []
        self._queries_tokens = 0
        self._hits_tokens = 0

    # -- commands -------------------------------------------------------------------------------

    def submit(self, request: SequenceRequest, now: float) -> None:
        self._run_until(now, start_due_steps=False)
        seq_id = request.seq_id
        if seq_id in self._pending or seq_id in self._waiting or seq_id in self._running:
            raise ValueError(f"sequence {request.seq_id} already submitted")
        if self.is_cold(now):
            self._warm_at = now + self.params.cold_start_ms / 1000.0
        overhead = self.params.first_token_overhead_ms / 1000.0
        # A cold start comes before everything else the request pays for.
        eligible = max(now, self._warm_at) + overhead + request.stall_s
        seq = _Sequence(request, eligible_at=eligible, not_before=eligible)
        self._pending[request.seq_id] = seq
        self._order += 1
        heapq.heappush(self._pending_heap, (eligible, self._order, request.seq_id))

    def cancel(self, seq_id: int, now: float) -> bool:
        """Drop a sequence wherever it is; its batch slot is free for the next step."""
        self._run_until(now, start_due_steps=False)
        for place in (self._pending, self._waiting, self._running):
            if place.pop(seq_id, None) is not None:
                return True
        return False

    def advance(self, now: float) -> list[Event]:
        """Run every step that ends at or before ``now``; return the events, in time order."""
        self._run_until(now)
        events, self._outbox = self._outbox, []
        return events

    def reset(self, now: float) -> None:
        """Forget every sequence and the prefix cache (admin reset)."""
        self._start_empty(now)

    # -- queries --------------------------------------------------------------------------------

    def next_event_time(self) -> float | None:
        if self._outbox:
            return self._now
        if self._step is not None:
            return self._step.end
        return self._next_step_start()

    def is_cold(self, now: float) -> bool:
        timeout = self.params.idle_timeout_s
        if timeout is None or self._has_work() or now < self._warm_at:
            return False
        return now >= self._last_active + timeout

    def counters(self, now: float) -> EngineCounters:
        block = self.params.block_tokens
        used = sum(
            -(-(s.request.prompt_tokens + s.generated) // block) for s in self._running.values()
        )
        return EngineCounters(
            running=len(self._running),
            waiting=len(self._waiting) + len(self._pending),
            kv_cache_usage=min(1.0, used / self.params.kv_cache_blocks),
            prefix_queries_tokens=self._queries_tokens,
            prefix_hits_tokens=self._hits_tokens,
            cold=self.is_cold(now),
        )

    # -- the step loop --------------------------------------------------------------------------

    def _has_work(self) -> bool:
        return bool(self._pending or self._waiting or self._running)

    def _run_until(self, now: float, start_due_steps: bool = True) -> None:
        """Finish steps ending by ``now``; begin those starting before it. A step due exactly at
        ``now`` begins only from :meth:`advance`, so everything submitted at one instant shares
        the step."""
        if now < self._now:
            raise ValueError(f"time went backwards: {now} < {self._now}")
        while True:
            if self._step is None:
                start = self._next_step_start()
                if start is None or start > now or (start == now and not start_due_steps):
                    break
                self._begin_step(start)
            elif self._step.end <= now:
                self._finish_step(self._step)
            else:
                break
        self._now = now

    def _next_step_start(self) -> float | None:
        ready: list[float] = []
        if self._pending_heap:
            ready.append(self._pending_heap[0][0])
        if self._waiting and len(self._running) < self.params.max_num_seqs:
            ready.append(self._free_at)
        if self._running:
            ready.append(min(s.not_before for s in self._running.values()))
        return max(self._free_at, min(ready)) if ready else None

    def _release_pending(self, start: float) -> None:
        heap = self._pending_heap
        while heap and heap[0][0] <= start:
            _, _, seq_id = heapq.heappop(heap)
            seq = self._pending.pop(seq_id, None)
            if seq is not None:  # else cancelled while pending
                self._waiting[seq_id] = seq

    def _admit(self, seq: _Sequence) -> None:
        request = seq.request
        matched = self._cache.match(request.block_hashes)
        # At least one prompt token is always computed: its logits give the first token.
        seq.cached_tokens = min(matched * self.params.block_tokens, request.prompt_tokens - 1)
        seq.cached_tokens = max(seq.cached_tokens, 0)
        seq.prefill_left = max(request.prompt_tokens - seq.cached_tokens, 1)
        self._queries_tokens += request.prompt_tokens
        self._hits_tokens += seq.cached_tokens
        self._running[request.seq_id] = seq

    def _begin_step(self, start: float) -> None:
        self._release_pending(start)
        budget = self.params.max_num_batched_tokens
        decode = [
            i for i, s in self._running.items() if s.prefill_left == 0 and s.not_before <= start
        ]
        budget -= len(decode)
        prefill: list[tuple[int, int]] = []
        for seq_id, seq in self._running.items():
            if seq.prefill_left > 0 and seq.not_before <= start and budget > 0:
                chunk = min(seq.prefill_left, budget)
                prefill.append((seq_id, chunk))
                budget -= chunk
        while self._waiting and len(self._running) < self.params.max_num_seqs and budget > 0:
            seq_id = next(iter(self._waiting))
            seq = self._waiting.pop(seq_id)
            self._admit(seq)
            chunk = min(seq.prefill_left, budget)
            prefill.append((seq_id, chunk))
            budget -= chunk
        if not decode and not prefill:
            self._free_at = start  # everything runnable is throttled; wait for the next ready
            return
        duration = sum(chunk for _, chunk in prefill) / self.params.prefill_tokens_per_s
        if decode:
            per_seq = self.params.decode_per_seq_ms * len(decode)
            duration += (self.params.decode_base_ms + per_seq) / 1000.0
        self._step = _Step(start, start + duration, tuple(prefill), tuple(decode))

    def _finish_step(self, step: _Step) -> None:
        self._step = None
        self._free_at = self._last_active = step.end
        for seq_id, chunk in step.prefill:
            seq = self._running.get(seq_id)
            if seq is None:
                continue  # cancelled mid-step
            seq.prefill_left -= chunk
            if seq.prefill_left == 0:
                self._cache.insert(seq.request.block_hashes)
                self._emit_token(seq, step.end, EventKind.FIRST_TOKEN)
        for seq_id in step.decode:
            seq = self._running.get(seq_id)
            if seq is not None:
                self._emit_token(seq, step.end, EventKind.TOKEN)

    def _emit_token(self, seq: _Sequence, at: float, kind: EventKind) -> None:
        request = seq.request
        dies_at = request.die_after_tokens
        if dies_at is None or seq.generated < dies_at:
            seq.generated += 1
            self._outbox.append(Event(kind, request.seq_id, at, seq.generated, seq.cached_tokens))
        if dies_at is not None and seq.generated >= dies_at:
            del self._running[request.seq_id]
            self._outbox.append(Event(EventKind.FAILED, request.seq_id, at, seq.generated))
        elif seq.generated >= request.max_tokens:
            del self._running[request.seq_id]
            self._outbox.append(
                Event(EventKind.FINISHED, request.seq_id, at, seq.generated, seq.cached_tokens)
            )
        else:
            seq.not_before = at + request.drip_s
