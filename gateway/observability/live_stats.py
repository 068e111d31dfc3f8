"""Per-backend numbers the status page shows live: recent traffic (a decayed request count, so
shares follow the last minute or so), observed and predicted TTFT (moving averages over recent
streams). Updated by the observer once per request; a few float operations, no lock (one event
loop), nothing retained per request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_TRAFFIC_TAU_S = 60.0  # a request's weight in the traffic share halves in about 42 s
_TTFT_WEIGHT = 0.2  # the newest stream's share of the moving average


@dataclass(slots=True)
class BackendLive:
    traffic: float = 0.0
    traffic_at: float = 0.0
    requests: int = 0
    observed_ttft_ms: float | None = None
    predicted_ttft_ms: float | None = None

    def decayed(self, now: float) -> float:
        return self.traffic * math.exp(-(now - self.traffic_at) / _TRAFFIC_TAU_S)


def _average(old: float | None, new: float) -> float:
    return new if old is None else old + _TTFT_WEIGHT * (new - old)


class LiveStats:
    def __init__(self) -> None:
        self.backends: dict[str, BackendLive] = {}

    def _of(self, backend: str) -> BackendLive:
        live = self.backends.get(backend)
        if live is None:
            live = self.backends[backend] = BackendLive()
        return live

    def served(self, backend: str, now: float) -> None:
        live = self._of(backend)
        live.traffic = live.decayed(now) + 1.0
        live.traffic_at = now
        live.requests += 1

    def first_token(self, backend: str, observed_ms: float, predicted_ms: float | None) -> None:
        live = self._of(backend)
        live.observed_ttft_ms = _average(live.observed_ttft_ms, observed_ms)
        if predicted_ms is not None:
            live.predicted_ttft_ms = _average(live.predicted_ttft_ms, predicted_ms)

    def shares(self, now: float) -> dict[str, float]:
        """Each backend's share of recent requests (0 for all when there were none)."""
        weights = {name: live.decayed(now) for name, live in self.backends.items()}
        total = sum(weights.values())
        return {name: (w / total if total > 0 else 0.0) for name, w in weights.items()}
