"""What the engine itself spent on one request, as ``Server-Timing`` entries.

Known at the first token: ``engine_overhead`` (fixed per-request cost, plus a cold start or a
stall), ``engine_queue`` (waiting for a batch slot and token budget) and ``engine_prefill``
(first scheduled step to first token). Known only at the end: ``engine_decode`` (first to last
token) and ``emit_lag`` (how late, at worst, this request's events left the emulator compared
with the engine model's times: the emulator's own error, which grows when its event loop is
saturated).

Where they go, since vLLM-style streaming sends its headers before the first token: a
non-streaming response carries them in its ``Server-Timing`` header (a gateway relaying it
merges them under the backend's hop label); a stream carries them in one SSE comment line,
``: server-timing <entries>``, after the usage chunk and before ``data: [DONE]`` (every SSE
client ignores comments). Durations are milliseconds of the engine's clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadtests.emulator.engine import Event

SSE_COMMENT_PREFIX = b": server-timing "


@dataclass(frozen=True, slots=True)
class FirstTokenPhases:
    overhead_s: float
    queue_s: float
    prefill_s: float

    @classmethod
    def of(cls, submitted_at: float, first: Event) -> FirstTokenPhases:
        return cls(
            overhead_s=max(first.eligible_at - submitted_at, 0.0),
            queue_s=first.scheduled_at - first.eligible_at,
            prefill_s=first.time - first.scheduled_at,
        )


def _entry(name: str, seconds: float) -> str:
    return f"{name};dur={seconds * 1000.0:.3f}"


def server_timing(phases: FirstTokenPhases, decode_s: float, emit_lag_s: float) -> str:
    return ", ".join(
        (
            _entry("engine_overhead", phases.overhead_s),
            _entry("engine_queue", phases.queue_s),
            _entry("engine_prefill", phases.prefill_s),
            _entry("engine_decode", decode_s),
            _entry("emit_lag", emit_lag_s),
        )
    )


def sse_comment(entries: str) -> bytes:
    return SSE_COMMENT_PREFIX + entries.encode() + b"\n\n"
