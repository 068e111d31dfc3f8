"""The hedge delay: how long to wait for a first token before starting the next candidate.

In order: the configured ``hedging.delay_ms``; else the first candidate's predicted p90 TTFT
(the routing policy's own estimate); else, for policies that predict nothing, the p90 of the
TTFTs this gateway recently observed from that backend; else ``fallback_delay_ms``. Never
below ``min_delay_ms``: hedging what is merely normal jitter only burns the retry budget.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gateway.config import HedgingConfig
from routing.types import Candidate

_WINDOW = 256  # recent first tokens per backend
_MIN_SAMPLES = 20
_RECOMPUTE_EVERY = 16


@dataclass(slots=True)
class _Recent:
    ttfts: deque[float] = field(default_factory=lambda: deque(maxlen=_WINDOW))
    p90_ms: float | None = None
    since: int = 0


@dataclass(slots=True)
class ObservedTtft:
    """Recent upstream TTFTs per backend, and their p90 (recomputed every few samples)."""

    _by_backend: dict[str, _Recent] = field(default_factory=dict)

    def record(self, backend: str, ttft_ms: float) -> None:
        recent = self._by_backend.get(backend)
        if recent is None:
            recent = self._by_backend[backend] = _Recent()
        recent.ttfts.append(ttft_ms)
        recent.since += 1
        if recent.since >= _RECOMPUTE_EVERY and len(recent.ttfts) >= _MIN_SAMPLES:
            ordered = sorted(recent.ttfts)
            recent.p90_ms = ordered[int(0.9 * (len(ordered) - 1))]
            recent.since = 0

    def p90_ms(self, backend: str) -> float | None:
        recent = self._by_backend.get(backend)
        return recent.p90_ms if recent is not None else None


def hedge_delay_s(hedging: HedgingConfig, first: Candidate, observed: ObservedTtft) -> float:
    delay_ms = (
        hedging.delay_ms
        or first.predicted_ttft_p90_ms
        or observed.p90_ms(first.backend)
        or hedging.fallback_delay_ms
    )
    return max(hedging.min_delay_ms, delay_ms) / 1000.0
