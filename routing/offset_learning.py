"""Learning a backend's fixed offset (``bias``): slow calibration plus detected level shifts.

A fixed offset moves in two ways. Slowly, as calibration (the model is a few ms off): an EWMA
of the residual at ``bias_alpha`` follows it, pooled with identically configured peers. And
all at once: a path gets 400 ms slower (a reroute, a stalled hop, a probe that measures a
different path than requests take), or recovers. An EWMA would take tens of samples to follow a
step (the issue-14 finding: 0 -> 134 ms in 8 slow samples, and never back), so a step is
detected instead (``consider_shift``): a residual beyond ``surprise_sigmas`` typical deviations
(and at least ``shift_min_ms`` and ``shift_rel`` of the prediction) is a candidate; when the
last ``shift_confirm`` candidates have one sign and one size, the smallest moves ``shift_ms``
at once.

The candidates are judged as a set, a window that slides: a candidate unlike the others pushes
the oldest out instead of starting over, so the verdict on the last ``shift_confirm`` does not
depend on the order they came in (reset-on-break made three residuals 12 ms apart a 250 or a
320 ms step by their order). Each is kept against the prediction before the candidates began
(the slow part has moved since), and an unsurprising residual ends them.

What could have changed decides whether a run is an offset at all. Residuals of a run must be
alike (within ``shift_spread`` of each other): queueing noise is as likely 30 ms as 300, an
offset adds the same to every request. When the dominant variable term (prefill, queue, step)
could plausibly have taken the residual by a change of its rate, sizes decide: an offset adds
the same whatever the request's size, a rate in proportion to its term, so the run is an
offset only if its residuals are clearly more alike than the rate each implies (what the term
took over what it would take at the configured rate). Requests
of one size cannot tell the two apart; the plausible rate keeps them (as before).

A candidate that is not (yet) a step teaches the slow part its whole residual x
``bias_alpha`` (the prediction follows a lone outlier a little), given back if the candidates
turn out to be a step. ``pending_clip`` (off by default) bounds that at the largest
unsurprising residual, for the backend and its peers alike: transient spikes come in runs
(a long prefill of another tenant hidden in the batch, scenario 2: +250 ms a few times in a
row), and each teaching the EWMA 0.05 x 250 ms left the pooled offset tens of ms high for
minutes (clipped: scenario 2's median error 13.2 -> 10.9% over 5 seeds). The same moves are
what steers traffic off a region in a load spike, though (scenario 1's TTFT p99: +5-15%
clipped), so they stay on until the spikes' cause is modelled (the queue's business).

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
    shift_confirm: int = 3  # ...fresher evidence: the last this many, of one sign and size
    shift_spread: float = 2.0  # "of one size": the largest at most this x the smallest
    pending_clip: float = float("inf")  # a candidate teaches the slow part <= this x threshold


class Verdict(Enum):
    SHIFTED = "shifted"  # the offset moved by a step
    PENDING = "pending"  # a candidate step: no rate learns from it
    NOT_A_SHIFT = "not a shift"  # unsurprising, or it scales with a rate: the rates' to learn


Candidate = tuple[float, float]  # (step against the prediction before the run, rate ratio)


class OffsetState(Protocol):
    bias_ms: float
    bias_dev_ms: float
    shift_ms: float
    shift_window: tuple[Candidate, ...]  # the last ``shift_confirm`` candidates, oldest first
    shift_held_ms: float  # what the slow part learned from the candidates, given back on a step
    offset_at: float | None  # when the backend's previous TTFT sample arrived


def surprise_ms(state: OffsetState, predicted_ms: float, p: OffsetParams) -> float:
    """The largest residual that is still this backend's usual noise (beyond it, a residual is
    a candidate step)."""
    return max(p.surprise_sigmas * state.bias_dev_ms, p.shift_min_ms, p.shift_rel * predicted_ms)


_CLEARLY = 1.25  # how much more alike the residuals must be than their ratios


def _reset(state: OffsetState) -> None:
    state.shift_window, state.shift_held_ms = (), 0.0


def alike(window: tuple[Candidate, ...], spread: float) -> bool:
    """Whether the candidates have one sign and one size (the largest at most ``spread`` x
    the smallest): what a moved offset adds to every request alike."""
    steps = [step for step, _ in window]
    if not (all(s > 0.0 for s in steps) or all(s < 0.0 for s in steps)):
        return False
    sizes = [abs(s) for s in steps]
    return max(sizes) <= spread * min(sizes)


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
    bound = surprise_ms(state, predicted_ms, p)
    if abs(residual_ms) <= bound or (residual_ms < 0.0 and state.shift_ms <= 0.0):
        _reset(state)
        return Verdict.NOT_A_SHIFT
    age = None if state.offset_at is None else now - state.offset_at
    stale = age is not None and age >= p.stale_evidence_s
    # Against the prediction before the candidates began (the slow part has moved since).
    latest = (residual_ms + state.shift_held_ms, rate_ratio)
    # Older candidates are older evidence than a stale sample's: it is judged alone.
    keep = 0 if stale else p.shift_confirm - 1
    earlier = state.shift_window[-keep:] if keep > 0 else ()
    window = state.shift_window = (*earlier, latest)
    if rate_plausible and not _offset_like(window, p.shift_spread):
        return Verdict.NOT_A_SHIFT  # the rate's to learn (kept: the window may yet be a step)
    full = stale or len(window) >= p.shift_confirm
    if not full or not alike(window, p.shift_spread):
        # Meanwhile the slow part moves as by an unsurprising residual, and gives it back if
        # the candidates turn out to be a step.
        before = state.bias_ms
        clipped = min(max(residual_ms, -p.pending_clip * bound), p.pending_clip * bound)
        total = before + state.shift_ms + p.bias_alpha * clipped
        state.bias_ms = min(max(total, floor_ms), p.max_bias_ms) - state.shift_ms
        state.shift_held_ms += state.bias_ms - before
        return Verdict.PENDING
    low = min((step for step, _ in window), key=abs)
    state.bias_ms -= state.shift_held_ms
    total = min(max(state.bias_ms + state.shift_ms + low, floor_ms), p.max_bias_ms)
    state.shift_ms = max(total - state.bias_ms, 0.0)
    _reset(state)
    return Verdict.SHIFTED


def _offset_like(window: tuple[Candidate, ...], spread_max: float) -> bool:
    """Whether the candidates' residuals are clearly more alike than the rate they imply
    (requests of different sizes, each paying the same extra): an offset, not a rate."""
    if len(window) < 2 or not alike(window, spread_max):
        return False
    sizes = [abs(step) for step, _ in window]
    ratios = [ratio for _, ratio in window]
    spread = max(sizes) / min(sizes)
    low_q = min(ratios)
    q_spread = max(ratios) / low_q if low_q > 0 else float("inf")
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


class StepOffsetState(Protocol):
    bias_ms: float
    step_scale: float  # the engine step over its model


def settle_step(state: StepOffsetState, step_ms: float, pull: float, min_term_ms: float) -> None:
    """When the step scale and the offset lean opposite ways (a faster step and a positive
    offset, or the reverse), move a share (``pull``) of the step scale's log distance to its
    prior into the offset, at this sample's step ``step_ms``, so its prediction does not
    change, and at most until the offset is back at zero. The engine step is nearly constant on
    a backend (its batch moves slowly), so a slower step and an offset look alike to most
    samples, and blaming each sample on one term let the two walk apart in compensating
    directions (scenario 2: offsets -9 to +62 ms against step scales 2.8 to 0.25; requests of
    other sizes, and the queue model, which counts steps, paid for it). A step that is really
    slower, with no offset against it, is left alone."""
    scale, bias = state.step_scale, state.bias_ms
    if step_ms < min_term_ms or (scale - 1.0) * bias >= 0.0:
        return
    configured = step_ms / scale
    moved = configured * (scale - scale ** (1.0 - pull))
    moved = max(moved, -bias) if bias > 0.0 else min(moved, -bias)
    state.step_scale, state.bias_ms = scale - moved / configured, bias + moved
