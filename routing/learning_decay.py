"""Learned corrections lose weight with the age of their evidence: they decay toward the prior.

An estimate built on samples nobody refreshed is a statement about the past: a backend the
router stopped choosing after one bad minute would otherwise carry that minute for ever (the
issue-14 finding: a recovered backend was never sent a request again). So every correction
(the offsets, the queue and step scales, the prefill rate) moves toward what configuration says
with a half-life, counted from ``grace_s`` after its last sample: a backend that keeps being
observed keeps what it learned; one that is not drifts back to its prior. Multiplicative
corrections decay in log terms (a 4x slower rate halves its log distance per half-life).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class DecayParams:
    half_life_s: float = 60.0  # math.inf: never decay
    grace_s: float = 5.0  # no decay this soon after a sample
    tick_s: float = 1.0  # how often the learner sweeps its estimates (router time)
    settled: float = 1e-3  # closer than this to the prior (ms, or log ratio): nothing to do


class Decaying(Protocol):
    bias_ms: float
    shift_ms: float
    queue_scale: float
    step_scale: float
    prefill_rate: float | None
    configured_rate: float | None
    last_at: float | None
    decayed_at: float | None


def deviation(est: Decaying) -> float:
    """How far ``est`` is from its prior, in ms for offsets and log ratio for scales."""
    rate = 0.0
    if est.prefill_rate is not None and est.configured_rate:
        rate = abs(math.log(est.prefill_rate / est.configured_rate))
    return max(
        abs(est.bias_ms),
        abs(est.shift_ms),
        abs(math.log(est.queue_scale)),
        abs(math.log(est.step_scale)),
        rate,
    )


def decay(est: Decaying, now: float, p: DecayParams) -> bool:
    """Decay ``est`` up to ``now``; whether anything moved."""
    if est.last_at is None:
        return False
    start = est.last_at + p.grace_s
    if est.decayed_at is not None and est.decayed_at > start:
        start = est.decayed_at
    if now <= start or deviation(est) < p.settled:
        return False
    est.decayed_at = now
    keep = 0.5 ** ((now - start) / p.half_life_s)
    est.bias_ms *= keep
    est.shift_ms *= keep
    est.queue_scale **= keep
    est.step_scale **= keep
    if est.prefill_rate is not None and est.configured_rate:
        est.prefill_rate = est.configured_rate * (est.prefill_rate / est.configured_rate) ** keep
    return True


def sweep(estimates: Iterable[tuple[object, Decaying]], now: float, p: DecayParams) -> list[object]:
    """Decay every estimate; the keys of those that moved."""
    return [key for key, est in estimates if decay(est, now, p)]
