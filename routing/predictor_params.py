"""Parameters of the TTFT predictor (validated at the policy's edge, plain values here)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PredictorParams:
    same_region_rtt_ms: float = 1.0  # when neither a probe nor the region table knows
    unknown_rtt_ms: float = 100.0
    default_output_tokens: int = 256  # long-form requests without max_tokens
    default_prompt_tokens: int = 1000  # prefill of a typical queued request, until learned
    stale_after_s: float = 5.0  # a signal this old has its spread doubled
    cold_ramp: float = 0.1  # P(cold) ramps from (1-r) to (1+r) x idle timeout
    itl_batch_slope: float = 1.0  # ITL at a full batch = ITL x (1 + slope)
    keep_warm_after: float = 0.5  # an idle serverless backend earns a keep-warm credit from
    # this fraction of its idle timeout (see routing.keep_warm)
    # The whole answer in the score (see routing.answer_score): an interactive request's own decode
    # (ITL at the batch it joins x its expected output) at this weight, and for every class the
    # ITL it adds to the requests already decoding there, over its output, at ``others``.
    interactive_decode_weight: float = 0.0
    others_decode_weight: float = 0.0
    others_prefill_weight: float = 0.0  # ...and its uncached prefill, which each of them waits for
    # ...an interactive request trading at most this much predicted TTFT for them (inf: no
    # bound; routing.answer_score)
    interactive_ttft_slack_ms: float = float("inf")
    evidence_horizon_s: float = 10.0  # a learned offset's spread grows to all of it by this age
