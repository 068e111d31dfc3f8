"""Where a backend's engine is in its step: the phase a point prediction otherwise guesses.

A request reaching a busy engine waits for the step in progress before its own prefill is
scheduled. The predictor takes half a step for it, the mean over a phase it cannot see, and
that guess alone is about the whole of the median error where the step is a large share of
the TTFT (scenarios 2 and 8: a uniform phase over a 20-30 ms step on a 50-70 ms TTFT is a
~10% median error however right every other term is). But a gateway streaming an answer from
that engine sees each step end: every running sequence gets one token a step, and the token
arrives half a round trip later. ``StepClock`` keeps, per backend, when the last token was
seen and the step's length (the gaps between consecutive ticks that look like plain decode
steps); ``wait_ms`` turns that into the wait for the next step boundary of a request that
reaches the engine and passes its fixed overhead ``lead_ms`` from now.

It answers only what the ticks say: nothing seen within a step (no stream running there, or a
step longer than a decode step, a prefill chunk in it, whose end nobody can tell), or a step
length unlike the predictor's own (ticks too sparse to measure one), and the half step stands.
The clock is fed by whatever sees tokens: the simulator at every step end of an engine where
that gateway has an answer streaming, and first tokens and ends of streams in the router
(``PredictedTTFTScorer``); a gateway's relay can feed every chunk (``seen``): the tokens
of one step, arriving a few ms apart over many streams, count as one tick (the first), so the
gaps learned are between steps. A real path blurs the ticks (reads late by a busy loop, another
stream's read of the same step seen a few ms on): while the gaps stray from the step by more
than a share of it on average, the wait is not told and the half step stands
(``loadtests/bench_fleet_calibration.py`` measures both on an emulated fleet).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from routing.predictor_detail import TERMS

# Ticks closer than this are one step's tokens (a path's jitter; no engine's decode step is
# that short). Absolute, not a share of the learned step: one too long at first (a prefill
# step) would then hide every other step and hold itself there.
_SAME_STEP_MS = 4.0
_GAP_RATIO = 1.5  # a gap longer than this x the step is a step with prefill, or an unseen one
_ALPHA = 0.1  # EWMA weight of one gap
_AGREE = 2.0  # the measured step is used within this factor of the predictor's decode step
_KEPT = 4  # ticks kept per backend
_HORIZON = 2.0  # steps the phase is extrapolated over (later boundaries may carry prefill)
# The phase is used only while the gaps learned stray from the step by at most this share of it
# on average: a busy path (a late read, another stream's read of the same step seen a few ms
# on) blurs step ends past what a wait can be told from, and half a step is then the better
# guess (a uniform phase misses by a quarter step on average).
_JITTER = 0.15
_RTT, _STEP, _OVERHEAD = (TERMS.index(name) for name in ("rtt", "step", "first_token_overhead"))


class Phase(NamedTuple):
    """What the clock told the decision at ``at`` about one backend (``explain`` shows it)."""

    at: float  # the decision's time (gateway clock, s)
    tick: float  # the latest tick seen by then (gateway clock, s)
    period_ms: float  # the decode step learned
    wait_ms: float  # the wait for the step boundary, in place of ...
    half_step_ms: float  # ... half the predictor's decode step


class _Track:
    """One backend's ticks and what was learned from them: one record, so a tick (the
    simulator hands in ~7 per request) costs one lookup, not one per field."""

    __slots__ = ("jitter", "last", "period", "ticks", "told")

    def __init__(self) -> None:
        # The last few ticks: a simulator hands a tick in when the step ends, a one-way trip
        # before the gateway would see it, so a read takes the latest one seen by then.
        self.ticks: deque[float] = deque(maxlen=_KEPT)
        self.last: float | None = None  # ticks[-1], read by every tick
        self.period: float | None = None
        self.jitter = 0.0  # EWMA of |gap - step| over the gaps learned (ms)
        self.told: Phase | None = None  # the latest phase a decision used

    def seen(self, at: float) -> None:
        """See :meth:`StepClock.seen`."""
        last = self.last
        if last is None:
            self.last = at
            self.ticks.append(at)
            return
        gap = 1000.0 * (at - last)
        if gap < _SAME_STEP_MS:
            return  # the same step, seen by another stream (arrivals jitter by a few ms)
        self.last = at
        self.ticks.append(at)
        period = self.period
        if period is None:
            self.period = gap
        elif gap <= _GAP_RATIO * period:
            self.period = period + _ALPHA * (gap - period)
            jitter = self.jitter
            self.jitter = jitter + _ALPHA * (abs(gap - period) - jitter)


class StepClock:
    """Per backend: when tokens were last seen (gateway clock, seconds) and the decode step's
    length learned from consecutive ticks (ms)."""

    __slots__ = ("_tracks",)

    def __init__(self) -> None:
        self._tracks: dict[str, _Track] = {}

    def feed(self, backend: str) -> Callable[[float], None]:
        """What hands ``backend``'s ticks in (``seen`` without the lookup): a caller that
        feeds one backend many times binds it once."""
        track = self._tracks.get(backend)
        if track is None:
            track = self._tracks[backend] = _Track()
        return track.seen

    def seen(self, backend: str, at: float) -> None:
        """A token from ``backend`` arrived at ``at``: its engine ended a step a one-way trip
        before. Ticks come in time order per backend; the tokens of one step (many streams,
        each arriving with its own jitter) count once, as the first of them."""
        track = self._tracks.get(backend)
        if track is None:
            track = self._tracks[backend] = _Track()
        track.seen(at)

    def period_ms(self, backend: str) -> float | None:
        """The decode step's length learned for ``backend`` (None: fewer than two ticks)."""
        track = self._tracks.get(backend)
        return None if track is None else track.period

    def jitter_ms(self, backend: str) -> float:
        """How far the gaps learned for ``backend`` stray from its step, on average."""
        track = self._tracks.get(backend)
        return 0.0 if track is None else track.jitter

    def wait_ms(self, backend: str, now: float, lead_ms: float, decode_ms: float) -> float | None:
        """The wait for the next step boundary of a request decided at ``now`` that is
        eligible ``lead_ms`` later on the engine's side of the last tick (a round trip plus
        its fixed overhead); None when the ticks cannot say. ``decode_ms``: the predictor's
        own decode step there, a check on the measured one."""
        reading = self._reading(backend, now, lead_ms, decode_ms)
        return None if reading is None else reading[0]

    def told(self, backend: str, at: float) -> Phase | None:
        """The phase :func:`phased` put into a decision about ``backend`` at ``at`` (None: the
        half step stood then)."""
        track = self._tracks.get(backend)
        phase = None if track is None else track.told
        return phase if phase is not None and phase.at == at else None

    def _reading(
        self, backend: str, now: float, lead_ms: float, decode_ms: float
    ) -> tuple[float, float, float] | None:
        """The wait, the tick it counts from and the period (see :meth:`wait_ms`)."""
        track = self._tracks.get(backend)
        period = None if track is None else track.period
        if track is None or period is None:
            return None
        if not decode_ms / _AGREE <= period <= _AGREE * decode_ms:
            return None
        if track.jitter > _JITTER * period:
            return None  # step ends too blurred to tell a wait from
        last = next((at for at in reversed(track.ticks) if at <= now), None)
        if last is None:
            return None
        age = 1000.0 * (now - last)
        elapsed = age + lead_ms
        if age > period or elapsed >= _HORIZON * period:
            return None
        return period - elapsed % period, last, period

    def _tell(self, backend: str, phase: Phase) -> None:
        self._tracks[backend].told = phase


def phased(
    clock: StepClock | None,
    backend: str,
    now: float,
    terms: tuple[float, ...],
    ttft_ms: float,
    decode_ms: float,
) -> tuple[tuple[float, ...], float]:
    """A candidate's terms (predictor TERMS order, the step term with its half step) and TTFT
    with the half step replaced by the clock's wait, when it knows one."""
    if clock is None or decode_ms <= 0.0:
        return terms, ttft_ms
    lead = terms[_RTT] + terms[_OVERHEAD]  # there and back, then the fixed overhead
    reading = clock._reading(backend, now, lead, decode_ms)
    if reading is None:
        return terms, ttft_ms
    wait, tick, period = reading
    clock._tell(backend, Phase(now, tick, period, wait, 0.5 * decode_ms))
    moved = wait - 0.5 * decode_ms
    step = terms[_STEP] + moved
    return (*terms[:_STEP], step, *terms[_STEP + 1 :]), max(ttft_ms + moved, 0.0)
