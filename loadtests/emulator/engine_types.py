"""The emulator engine's vocabulary: the requests it takes, the events and counters it gives,
and the read-only backlog view (:mod:`loadtests.emulator.engine` is the timing model itself)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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
    # First-token events only: when the sequence could be scheduled (after the fixed overhead,
    # a cold start, a stall) and when its first step began; 0.0 on other events.
    eligible_at: float = 0.0
    scheduled_at: float = 0.0


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
    # Requests submitted, ever: what vLLM's finished counter (``request_success_total``) plus
    # the growth of running + waiting add up to between two scrapes.
    requests: int = 0


@dataclass(frozen=True, slots=True)
class Backlog:
    """What stands between a new request and its first token on one engine (read-only view)."""

    prefill_tokens: int  # prompt tokens still to prefill ahead of a new request (FIFO)
    queued: int  # sequences waiting for a batch slot (or still paying overhead/cold start)
    running: int
    decoding: int
    remaining_tokens: tuple[int, ...]  # output tokens left per running sequence, ascending
    busy_until: float  # end of the step in progress (or now)


def computed_prompt_tokens(prompt_tokens: int, cached_blocks: int, block_tokens: int) -> int:
    """Prompt tokens to prefill given the cached leading blocks. At least one is always
    computed: its logits give the first token."""
    cached = max(min(cached_blocks * block_tokens, prompt_tokens - 1), 0)
    return max(prompt_tokens - cached, 1)
