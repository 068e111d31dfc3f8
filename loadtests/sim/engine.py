"""The emulator's engine model, driven in virtual time, plus the truth the oracle may read.

``SimEngine`` *is* ``loadtests.emulator.engine.Engine``; it only stops emitting one event per
decoded token (the simulator needs the first token and the finish, and per-token events were
over half the run time), which means overriding the end of a step with the token bookkeeping
inlined. Requests with injected faults take the base class's path unchanged. ``tests/sim`` checks that first-token and finish times match the
emulator's engine exactly on random workloads, so the two cannot drift apart silently.

The truth queries read the engine's private state on purpose: only the simulation's oracle
may know the real queue and cache, and this module is the one place that does it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from loadtests.emulator.engine import Engine, Event, EventKind, SequenceRequest, _Sequence, _Step


@dataclass(frozen=True, slots=True)
class Backlog:
    """What stands between a new request and its first token on one engine."""

    prefill_tokens: int  # prompt tokens still to prefill ahead of a new request (FIFO)
    queued: int  # sequences waiting for a batch slot (or still paying overhead/cold start)
    running: int
    decoding: int
    remaining_tokens: tuple[int, ...]  # output tokens left per running sequence, ascending
    busy_until: float  # end of the step in progress (or now)


class SimEngine(Engine):
    _faults = False  # set for good once a request with an injected death is submitted

    def submit(self, request: SequenceRequest, now: float) -> None:
        if request.die_after_tokens is not None:
            self._faults = True
        super().submit(request, now)

    def _finish_step(self, step: _Step) -> None:
        """The base class's step end with the per-token bookkeeping inlined (the hot loop)."""
        if self._faults:
            super()._finish_step(step)  # faults keep the emulator's exact path
            return
        running, outbox, end = self._running, self._outbox, step.end
        self._step = None
        self._free_at = self._last_active = end
        for seq_id, chunk in step.prefill:
            seq = running.get(seq_id)
            if seq is None:
                continue  # cancelled mid-step
            seq.prefill_left -= chunk
            if seq.prefill_left == 0:
                self._cache.insert(seq.request.block_hashes)
                self._token(seq, end, EventKind.FIRST_TOKEN)
        for seq_id in step.decode:
            seq = running.get(seq_id)
            if seq is None:
                continue
            request = seq.request
            seq.generated += 1
            if seq.generated >= request.max_tokens:
                del running[seq_id]
                outbox.append(
                    Event(EventKind.FINISHED, seq_id, end, seq.generated, seq.cached_tokens)
                )
            else:
                seq.not_before = end + request.drip_s

    def _token(self, seq: _Sequence, at: float, kind: EventKind) -> None:
        """``_emit_token`` without the per-token event (the first token still has one)."""
        request = seq.request
        seq.generated += 1
        self._outbox.append(Event(kind, request.seq_id, at, seq.generated, seq.cached_tokens))
        if seq.generated >= request.max_tokens:
            del self._running[request.seq_id]
            self._outbox.append(
                Event(EventKind.FINISHED, request.seq_id, at, seq.generated, seq.cached_tokens)
            )
        else:
            seq.not_before = at + request.drip_s

    # -- truth, for the oracle only ---------------------------------------------------------

    def cached_blocks(self, hashes: Sequence[int]) -> int:
        """Leading blocks of ``hashes`` in the KV cache now (read-only: LRU order untouched)."""
        cache = self._cache
        matched = 0
        for block_hash in hashes:
            if block_hash not in cache:
                break
            matched += 1
        return matched

    def uncached_tokens(self, prompt_tokens: int, hashes: Sequence[int]) -> int:
        cached = min(self.cached_blocks(hashes) * self.params.block_tokens, prompt_tokens - 1)
        return max(prompt_tokens - max(cached, 0), 1)

    def backlog(self, now: float) -> Backlog:
        queued = list(self._pending.values()) + list(self._waiting.values())
        ahead = sum(s.prefill_left for s in self._running.values())
        ahead += sum(
            self.uncached_tokens(s.request.prompt_tokens, s.request.block_hashes) for s in queued
        )
        remaining = sorted(s.request.max_tokens - s.generated for s in self._running.values())
        decoding = sum(1 for s in self._running.values() if s.prefill_left == 0)
        step = self._step
        return Backlog(
            ahead, len(queued), len(self._running), decoding, tuple(remaining),
            step.end if step is not None else now,
        )  # fmt: skip

    def ready_at(self, now: float) -> float:
        """When a request submitted at ``now`` could start: after a cold start if one is due
        (or under way), plus the fixed per-request overhead."""
        start = now + self.params.cold_start_ms / 1000.0 if self.is_cold(now) else now
        start = max(start, self._warm_at) if math.isfinite(self._warm_at) else start
        return start + self.params.first_token_overhead_ms / 1000.0
