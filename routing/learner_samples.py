"""What one learner sample says about itself: its measured TTFT, how long it held a batch slot
before its first token, and whether it paid a cold start (``routing.learner`` blames the rest
of its residual)."""

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


_IN_BATCH = ("first_token_overhead", "prefill", "step")  # what a TTFT spends in a batch slot


def in_batch_ms(obs: Observation) -> float:
    """The part of the sample's TTFT it spent in the engine's batch (a slot held): its prefill
    and the step it shared, not the wait for a slot, the path or a cold start. The backend's
    word on its queue wait says what the rest was; without it the prediction's in-batch terms
    stand for it. The TTFT itself was the sample once: in an overload (scenario 9: 22 s
    TTFTs) a slot then seemed held for the whole wait, the predicted wait for a slot grew
    with it (slots ahead x slot time) and overstated the queue by more than the learned
    queue scale can take back (4x)."""
    ttft = ttft_of(obs)
    terms = obs.predicted_terms_ms
    if obs.queue_wait_ms is not None:
        return max(ttft - terms.get("rtt", 0.0) - obs.queue_wait_ms, 0.0)
    if not terms:
        return ttft
    return sum(terms.get(k, 0.0) for k in _IN_BATCH)


def decided_at(obs: Observation) -> float:
    """When the sample's request was routed: its TTFT before its first token (``obs.at`` when
    learned then), and its stream too when learned at the end."""
    took_ms = ttft_of(obs)
    if not obs.first_token_observed and obs.itl_ms is not None and obs.output_tokens > 1:
        took_ms += obs.itl_ms * (obs.output_tokens - 1)
    return obs.at - took_ms / 1000.0
