"""What one learner sample says about itself: its measured TTFT, and whether it paid a cold
start (``routing.learner`` blames the rest of its residual)."""

from __future__ import annotations

from routing.types import BackendSpec, Observation


def ttft_of(obs: Observation) -> float:
    """The sample's measured TTFT. Only samples with one get past ``observe`` and
    ``observe_first_token`` (they return first), so the ``or`` never applies: it narrows the
    type with no check on the request path."""
    return obs.ttft_ms or 0.0


def cold_start_of(obs: Observation, predicted_cold: float, spec: BackendSpec | None) -> bool:
    """Did this request pay a cold start? The backend's word if given; else whether the
    residual left after the warm terms holds at least half a cold start."""
    if obs.cold_start is not None:
        return obs.cold_start
    full = spec.cold_start_ms if spec is not None else 0.0
    if full <= 0.0:
        full = predicted_cold
    if full <= 0.0:
        return False
    warm = sum(obs.predicted_terms_ms.values()) - predicted_cold
    return ttft_of(obs) - warm > 0.5 * full
