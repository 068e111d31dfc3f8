"""Learning a backend's fixed offset (``bias``): slow calibration plus detected level shifts.

A fixed offset moves in two ways. Slowly, as calibration (the model is a few ms off): an EWMA
of the residual at ``bias_alpha`` follows it, pooled with identically configured peers. And
all at once: a path gets 400 ms slower (a reroute, a stalled hop, a probe that measures a
different path than requests take), or recovers. An EWMA would take tens of samples to follow a
step (the issue-14 finding: 0 -> 134 ms in 8 slow samples, and never back), so a step is
detected instead (``consider_shift``): a residual beyond ``surprise_sigmas`` typical deviations
(and at least ``shift_min_ms`` and ``shift_rel`` of the prediction) is a candidate; a run of
``shift_confirm`` of them with one sign confirms it, and the smallest moves ``shift_ms`` at once.

What could have changed decides whether a run is an offset at all. Residuals of a run must be
alike (within ``shift_spread`` of each other): queueing noise is as likely 30 ms as 300, an
offset adds the same to every request. When the dominant variable term (prefill, queue, step)
could plausibly have taken the residual by a change of its rate, sizes decide: an offset adds
the same whatever the request's size, a rate in proportion to its term, so the run is an
offset only if its residuals are clearly more alike than the rate each implies (what the term
took over what it would take at the configured rate). Requests
of one size cannot tell the two apart; the plausible rate keeps them (as before).

A shift is symmetric: a step back down is detected like a step up, and it never goes below
zero (a path faster than configured is the slow part's to learn, from many samples). When the
evidence is old (no sample for ``stale_evidence_s``, the usual case for a backend the router
stopped choosing and re-measures now and then) one surprise is enough: what it says is newer
than anything the estimate was built on. ``shift_ms`` is the backend's own (a level change on
one backend says nothing about its peers); the pooled estimate does not learn a member's step.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol


@dataclass(frozen=True, slots=True)
class OffsetParams:
    bias_alpha: float = 0.05
    max_bias_ms: float = 1000.0  # beyond this an offset is an outage, not a correction
    surprise_sigmas: float = 4.0  # a residual this many typical deviations off is a candidate
    shift_min_ms: float = 20.0  # ...and at least this many ms
    shift_rel: float = 0.25  # ...and this fraction of the prediction
    stale_evidence_s: float = 5.0  # older evidence: one surprise confirms a shift
    shift_confirm: int = 3  # ...fresher evidence: this many in a row, of one sign and size
    shift_spread: float = 2.0  # "of one size": the largest at most this x the smallest


class Verdict(Enum):
    SHIFTED = "shifted"  # the offset moved by a step
    PENDING = "pending"  # a candidate step: no rate learns from it
    NOT_A_SHIFT = "not a shift"  # unsurprising, or it scales with a rate: the rates' to learn


class OffsetState(Protocol):
    bias_ms: float
    bias_dev_ms: float
    shift_ms: float
    shift_run: int  # consecutive candidate shifts, signed by their direction
    shift_held_ms: float  # what the slow part learned from them, given back on a step
    shift_low_ms: float  # the smallest of them (signed) ...
    shift_high_ms: float  # ...and the largest
    shift_low_ratio: float  # the rates they imply for the dominant variable term (0: none)
    shift_high_ratio: float
    offset_at: float | None  # when the backend's previous TTFT sample arrived


def surprising(
    state: OffsetState, residual_ms: float, predicted_ms: float, p: OffsetParams
) -> bool:
    """Whether ``residual_ms`` is far beyond the usual noise of this backend's offsets."""
    threshold = max(
        p.surprise_sigmas * state.bias_dev_ms, p.shift_min_ms, p.shift_rel * predicted_ms
    )
    return abs(residual_ms) > threshold


_CLEARLY = 1.25  # how much more alike the residuals must be than their ratios


def _reset(state: OffsetState) -> None:
    state.shift_run, state.shift_held_ms = 0, 0.0
    state.shift_low_ms = state.shift_high_ms = 0.0
    state.shift_low_ratio = state.shift_high_ratio = 0.0


def consider_shift(
    state: OffsetState,
    residual_ms: float,
    rate_ratio: float,
    rate_plausible: bool,
    predicted_ms: float,
    floor_ms: float,
    now: float,
    p: OffsetParams,
) -> Verdict:
    """Is ``residual_ms`` (actual minus predicted TTFT, both with the learned offset) a step of
    the offset? ``rate_ratio``: what the dominant variable term took over what it would at its
    configured rate (constant across request sizes if that rate changed), and
    ``rate_plausible`` whether a change of that rate could have caused the residual.
    ``floor_ms``: minus the offsets the learned ones may cancel (RTT, overhead)."""
    if not surprising(state, residual_ms, predicted_ms, p) or (
        residual_ms < 0.0 and state.shift_ms <= 0.0
    ):
        _reset(state)
        return Verdict.NOT_A_SHIFT
    # Against the prediction before the run began (the slow part has moved since).
    step_ms = residual_ms + state.shift_held_ms
    sign, size = (1 if step_ms > 0 else -1), abs(step_ms)
    ratio = rate_ratio
    low, high = abs(state.shift_low_ms), abs(state.shift_high_ms)
    if state.shift_run * sign > 0 and max(high, size) <= p.shift_spread * min(low, size):
        if size < low:
            state.shift_low_ms = step_ms
        if size > high:
            state.shift_high_ms = step_ms
        state.shift_low_ratio = min(state.shift_low_ratio, ratio)
        state.shift_high_ratio = max(state.shift_high_ratio, ratio)
        state.shift_run += sign
    else:  # a new run: what the slow part learned from the last one stays learned
        state.shift_held_ms, step_ms, sign = 0.0, residual_ms, (1 if residual_ms > 0 else -1)
        state.shift_low_ms = state.shift_high_ms = step_ms
        state.shift_low_ratio = state.shift_high_ratio = ratio
        state.shift_run = sign
    if rate_plausible and not _offset_like(state):
        return Verdict.NOT_A_SHIFT  # the rate's to learn (the run is kept: it may yet be one)
    age = None if state.offset_at is None else now - state.offset_at
    stale = age is not None and age >= p.stale_evidence_s
    if not stale and abs(state.shift_run) < p.shift_confirm:
        # Meanwhile the slow part moves as it would anyway (the prediction follows a lone
        # outlier a little, as before), and gives it back if the run turns out to be a step.
        before = state.bias_ms
        total = before + state.shift_ms + p.bias_alpha * residual_ms
        state.bias_ms = min(max(total, floor_ms), p.max_bias_ms) - state.shift_ms
        state.shift_held_ms += state.bias_ms - before
        return Verdict.PENDING
    state.bias_ms -= state.shift_held_ms
    total = min(max(state.bias_ms + state.shift_ms + state.shift_low_ms, floor_ms), p.max_bias_ms)
    state.shift_ms = max(total - state.bias_ms, 0.0)
    _reset(state)
    return Verdict.SHIFTED


def _offset_like(state: OffsetState) -> bool:
    """Whether the run's residuals are clearly more alike than the rate they imply (requests
    of different sizes, each paying the same extra): an offset, not a rate."""
    if abs(state.shift_run) < 2:
        return False
    spread = state.shift_high_ms / state.shift_low_ms
    low_q = state.shift_low_ratio
    q_spread = state.shift_high_ratio / low_q if low_q > 0 else float("inf")
    return _CLEARLY * spread < q_spread


def learn_bias(
    state: OffsetState,
    residual_ms: float,
    floor_ms: float,
    p: OffsetParams,
) -> None:
    """The slow part: an EWMA of ``residual_ms``, kept (with the shift) within [floor, cap]."""
    cap = p.max_bias_ms
    learned = state.bias_ms + p.bias_alpha * residual_ms
    total = min(max(learned + state.shift_ms, floor_ms), cap)
    state.bias_ms = total - state.shift_ms
    state.bias_dev_ms += p.bias_alpha * (min(abs(residual_ms), cap) - state.bias_dev_ms)
