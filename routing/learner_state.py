"""What the online learner keeps: its parameters, each backend's estimate, and the key that
pools identically configured backends (re-exported by :mod:`routing.learner`)."""

from __future__ import annotations

from dataclasses import dataclass

from routing.offset_learning import Candidate
from routing.scale_log import ScaleLog
from routing.types import BackendSpec


@dataclass(frozen=True, slots=True)
class LearnerParams:
    alpha: float = 0.1  # EWMA weight of one sample for rates and scales
    bias_alpha: float = 0.05
    quantile_step: float = 0.05  # step of the online p90 tracker of actual/predicted
    min_term_ms: float = 2.0  # a term smaller than this carries no signal about its rate
    # ...nor one this small a share of the whole prediction: the other terms' noise (a ms of
    # jitter on a 2 ms prefill under a 100 ms offset) would read as a 50% slower GPU.
    min_term_share: float = 0.1
    dominant_share: float = 0.6  # share of (queue+prefill+cold) a term needs to take the blame
    max_ratio: float = 4.0  # estimates stay within [1/r, r] x the configured value
    # One sample moves a rate or scale by at most alpha x this, in log terms: residuals are
    # skewed (a request can land behind a long step, never before the one in progress), and a
    # clipped update tracks their median, which is what a point prediction should hit.
    max_log_step: float = 0.5
    # Each sample moves this share of the step scale's log distance to 1 into the offset, at
    # the sample's step (``OnlineLearner._settle_step``): the two are near-collinear.
    step_pull: float = 0.05
    max_bias_ms: float = 1000.0  # beyond this an offset is an outage, not a correction
    # A dominant prefill that took this many times longer than predicted is not a slower GPU
    # but an offset that moved (an RTT jump, a stalled hop): blamed on bias, not on the rate.
    offset_ratio: float = 4.0
    # Weight of the estimate pooled over identically configured backends of a region. Each
    # backend's own estimate is a noisy walk (ten-odd effective samples); between identical
    # GPUs that noise alone makes some look faster for minutes and draws load to them.
    peer_weight: float = 0.0
    # Level shifts of the offset (see ``routing.offset_learning``).
    surprise_sigmas: float = 4.0
    shift_min_ms: float = 20.0
    shift_rel: float = 0.25
    stale_evidence_s: float = 5.0
    shift_confirm: int = 3
    shift_spread: float = 2.0
    # A candidate step teaches the slow part (the backend's and its peers') at most this x the
    # surprise threshold (``routing.offset_learning``: off, inf, by default).
    pending_clip: float = float("inf")
    # Corrections decay toward configuration when no sample refreshes them (``learning_decay``).
    half_life_s: float = 60.0
    decay_grace_s: float = 5.0
    decay_tick_s: float = 1.0


class BackendEstimate:
    """Mutable learned state for one backend; ``None`` means "use the configured value"."""

    __slots__ = (
        "abs_rel_error",
        "bias_dev_ms",
        "bias_ms",
        "cold_start_ms",
        "configured_rate",
        "decayed_at",
        "failures",
        "itl_ms",
        "last_at",
        "observations",
        "offset_at",
        "prefill_ms",
        "prefill_rate",
        "prefill_samples",
        "queue_log",
        "queue_scale",
        "ratio_p90",
        "service_ms",
        "shift_held_ms",
        "shift_ms",
        "shift_rtt_ms",
        "shift_window",
        "step_scale",
    )

    def __init__(self) -> None:
        self.observations = 0
        self.failures = 0
        self.last_at: float | None = None
        self.prefill_rate: float | None = None
        self.prefill_samples = 0
        self.queue_scale = 1.0
        self.queue_log = ScaleLog()  # its recent values (a late answer's decision's scale)
        self.step_scale = 1.0  # engine step (decode beside a prefill) over its model
        self.bias_ms = 0.0  # the slow, calibrating part of the offset (pooled with peers)
        self.bias_dev_ms = 0.0
        self.shift_ms = 0.0  # level shifts of this backend's offset, detected as steps
        self.shift_window: tuple[Candidate, ...] = ()  # candidate steps (offset_learning)
        self.shift_held_ms = 0.0
        self.shift_rtt_ms: float | None = None  # the RTT the step was measured against
        self.offset_at: float | None = None
        self.configured_rate: float | None = None  # the prior ``prefill_rate`` decays toward
        self.decayed_at: float | None = None

        self.itl_ms: float | None = None
        self.cold_start_ms: float | None = None
        self.service_ms: float | None = None  # how long a request occupies a batch slot
        self.prefill_ms: float | None = None  # prefill time of a typical request here
        self.ratio_p90 = 1.0  # online p90 of actual / predicted TTFT
        self.abs_rel_error: float | None = None  # EWMA of |actual / predicted - 1|

    @property
    def offset_ms(self) -> float:
        """The whole learned offset of this backend's own estimate."""
        return self.bias_ms + self.shift_ms


def peer_key(spec: BackendSpec) -> tuple[object, ...]:
    """Backends with equal keys are configured alike in one region: they pool corrections."""
    return (
        spec.region, spec.kind, spec.prefill_tokens_per_s, spec.itl_ms, spec.max_num_seqs,
        spec.max_num_batched_tokens, spec.first_token_overhead_ms,
    )  # fmt: skip
