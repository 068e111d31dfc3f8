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
discrete-event simulator drive the same class; the simulator passes ``token_events=False``
(only first-token, finished and failed events: per-token events were over half its run time)
and reads the engine's truth through the read-only queries (:meth:`Engine.backlog`,
:meth:`Engine.cached_prefix_blocks`, :meth:`Engine.ready_at`), which never change its state.
``params`` may be swapped between calls (a slowdown); the step in progress keeps its end.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from loadtests.emulator.config import EngineParams
from loadtests.emulator.engine_types import Backlog as Backlog
from loadtests.emulator.engine_types import EngineCounters as EngineCounters
from loadtests.emulator.engine_types import Event as Event
from loadtests.emulator.engine_types import EventKind as EventKind
from loadtests.emulator.engine_types import SequenceRequest as SequenceRequest
from loadtests.emulator.engine_types import computed_prompt_tokens as computed_prompt_tokens
from loadtests.emulator.prefix_cache import PrefixCache
from loadtests.emulator.stretch import Stretch


@dataclass(slots=True)
class _Sequence:
    request: SequenceRequest
    eligible_at: float
    prefill_left: int = 0
    generated: int = 0
    cached_tokens: int = 0
    not_before: float = 0.0
    scheduled_at: float = 0.0


@dataclass(frozen=True, slots=True)
class _Step:
    start: float
    end: float
    prefill: tuple[tuple[int, int], ...]  # (seq_id, chunk tokens)
    decode: tuple[int, ...]


class Engine:
    # Decode-only steps counted as a stretch instead of one by one (no per-token events only;
    # loadtests.emulator.stretch). A switch so tests can compare with step-by-step decoding.
    fast_forward = True

    def __init__(
        self, params: EngineParams, now: float = 0.0, *, token_events: bool = True
    ) -> None:
        self.params = params
        self._token_events = token_events
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
        self._step_ended = -math.inf  # no step yet
        self._now = now
        self._order = 0
        # Serverless engines start scaled to zero; dedicated ones are always warm.
        self._last_active = -math.inf if params.idle_timeout_s is not None else now
        self._warm_at = -math.inf
        self._outbox: list[Event] = []
        self._queries_tokens = 0
        self._hits_tokens = 0
        self._requests = 0
        self._stretch: Stretch | None = None
        self.stretched_steps = 0  # steps run as part of a stretch (the fast-forward's reach)
        self._plain = True  # no sequence with a drip or an injected death submitted yet

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
        if request.drip_s or request.die_after_tokens is not None:
            self._plain = False
        self._pending[request.seq_id] = seq
        self._requests += 1
        self._order += 1
        heapq.heappush(self._pending_heap, (eligible, self._order, request.seq_id))

    def cancel(self, seq_id: int, now: float) -> bool:
        """Drop a sequence wherever it is; its batch slot is free for the next step."""
        self._run_until(now, start_due_steps=False)
        self._end_stretch()  # the batch changes: the step in progress finishes one by one
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

    @property
    def last_step_end(self) -> float:
        """When the engine's latest finished step ended (its tokens left then)."""
        return self._step_ended

    def is_cold(self, now: float) -> bool:
        timeout = self.params.idle_timeout_s
        if timeout is None or self._has_work() or now < self._warm_at:
            return False
        return now >= self._last_active + timeout

    def counters(self, now: float) -> EngineCounters:
        self._settle()
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
            requests=self._requests,
            cold=self.is_cold(now),
        )

    def cached_prefix_blocks(self, hashes: Sequence[int]) -> int:
        """Leading blocks of ``hashes`` in the KV cache now; the LRU order is left untouched."""
        return self._cache.peek(hashes)

    def uncached_tokens(self, prompt_tokens: int, hashes: Sequence[int]) -> int:
        """Prompt tokens a request submitted now would prefill, given today's cache."""
        cached = self._cache.peek(hashes)
        return computed_prompt_tokens(prompt_tokens, cached, self.params.block_tokens)

    def backlog(self, now: float) -> Backlog:
        """The queue and batch a request submitted at ``now`` would find."""
        self._settle()
        queued = [*self._pending.values(), *self._waiting.values()]
        running = self._running.values()
        ahead = sum(s.prefill_left for s in running)
        ahead += sum(
            self.uncached_tokens(s.request.prompt_tokens, s.request.block_hashes) for s in queued
        )
        remaining = sorted(s.request.max_tokens - s.generated for s in running)
        step = self._step
        return Backlog(
            prefill_tokens=ahead,
            queued=len(queued),
            running=len(self._running),
            decoding=sum(1 for s in running if s.prefill_left == 0),
            remaining_tokens=tuple(remaining),
            busy_until=step.end if step is not None else now,
        )

    def ready_at(self, now: float) -> float:
        """When a request submitted at ``now`` could first be scheduled: after a cold start if
        one is due (or under way), plus the fixed per-request overhead."""
        start = now + self.params.cold_start_ms / 1000.0 if self.is_cold(now) else now
        start = max(start, self._warm_at)
        return start + self.params.first_token_overhead_ms / 1000.0

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
        if self._stretch is not None:
            return self._free_at  # every sequence may decode again from the last step's end
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

    def _admit(self, seq: _Sequence, start: float) -> None:
        request = seq.request
        matched = self._cache.match(request.block_hashes)
        block = self.params.block_tokens
        seq.prefill_left = computed_prompt_tokens(request.prompt_tokens, matched, block)
        seq.cached_tokens = request.prompt_tokens - seq.prefill_left
        seq.scheduled_at = start
        self._queries_tokens += request.prompt_tokens
        self._hits_tokens += seq.cached_tokens
        self._running[request.seq_id] = seq

    def _settle(self) -> None:
        if self._stretch is not None:
            self._stretch.settle(self._running)

    def _end_stretch(self) -> None:
        self._settle()
        self._stretch = None

    def _begin_step(self, start: float) -> None:
        stretch = self._stretch
        if stretch is not None:
            heap = self._pending_heap
            if stretch.may_continue(self.params, heap[0][0] if heap else math.inf, start):
                self._step = _Step(start, start + stretch.duration, (), stretch.decode)
                return
            self._end_stretch()
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
            self._admit(seq, start)
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
        if decode and not prefill and self._plain and self.fast_forward and not self._token_events:
            self._stretch = Stretch.after(self.params, self._running, decode, duration)

    def _finish_step(self, step: _Step) -> None:
        self._step = None
        end = step.end
        self._free_at = self._last_active = self._step_ended = end
        if self._stretch is not None:
            self._stretch.steps += 1  # nobody finishes in it: its tokens are counted later
            self.stretched_steps += 1
            return
        running = self._running
        for seq_id, chunk in step.prefill:
            seq = running.get(seq_id)
            if seq is None:
                continue  # cancelled mid-step
            seq.prefill_left -= chunk
            if seq.prefill_left == 0:
                self._cache.insert(seq.request.block_hashes)
                self._emit_token(seq, end, EventKind.FIRST_TOKEN)
        if self._token_events:
            for seq_id in step.decode:
                seq = running.get(seq_id)
                if seq is not None:
                    self._emit_token(seq, end, EventKind.TOKEN)
        else:
            self._decode_quietly(step.decode, end)

    def _decode_quietly(self, decode: tuple[int, ...], end: float) -> None:
        """The decode half of a step without per-token events (the simulator's hot loop)."""
        running, outbox = self._running, self._outbox
        for seq_id in decode:
            seq = running.get(seq_id)
            if seq is None:
                continue
            request = seq.request
            if request.die_after_tokens is not None:
                self._emit_token(seq, end, EventKind.TOKEN)
                continue
            seq.generated += 1
            if seq.generated >= request.max_tokens:
                del running[seq_id]
                outbox.append(
                    Event(EventKind.FINISHED, seq_id, end, seq.generated, seq.cached_tokens)
                )
            else:
                seq.not_before = end + request.drip_s

    def _emit_token(self, seq: _Sequence, at: float, kind: EventKind) -> None:
        request = seq.request
        dies_at = request.die_after_tokens
        if dies_at is None or seq.generated < dies_at:
            seq.generated += 1
            if kind is EventKind.FIRST_TOKEN:
                self._outbox.append(
                    Event(
                        kind, request.seq_id, at, seq.generated, seq.cached_tokens,
                        seq.eligible_at, seq.scheduled_at,
                    )
                )  # fmt: skip
            elif self._token_events:
                self._outbox.append(
                    Event(kind, request.seq_id, at, seq.generated, seq.cached_tokens)
                )
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
