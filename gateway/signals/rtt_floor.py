"""A probe RTT estimate robust to upward outliers (CPU starvation), quick to follow real moves.

Network RTT has a hard floor: a starved event loop can only make a round trip look *longer*
(a 1 ms loopback probe reads tens of ms), never shorter. So the estimate keeps the minimum of
the last :data:`RTT_FLOOR_WINDOW` pooled samples beside the EWMA and:

- clamps a sample above that floor by more than :func:`spike_slack_ms` before it enters the
  EWMA, so one spike barely moves the estimate;
- never lets the estimate sit below the floor, so a persistent rise (every sample in the
  window higher, i.e. the floor itself rose) shows as soon as the window is full of it;
- never lets the estimate sit above the newest sample, so a downward move is taken at once.

Hence the estimate always lies within [floor, newest sample] and within the samples' range.
"""

from __future__ import annotations

from dataclasses import dataclass

# Two samples, not more: issue 14 requires leaving a degraded backend within 2 probe
# intervals, and the floor rises only once every sample in the window is higher, so a longer
# window would delay a real step. Two still discards any isolated spike.
RTT_FLOOR_WINDOW = 2

# Jitter allowed above the floor before a sample counts as scheduling noise: a couple of ms
# absolute (loopback and same-zone RTTs are ~1 ms and jitter by about that), plus a share of
# the floor (a cross-region path jitters in proportion to its length).
SLACK_ABSOLUTE_MS = 2.0
SLACK_RELATIVE = 0.1


@dataclass(frozen=True, slots=True)
class RobustRtt:
    """The estimate and the window it is bounded by; ``RobustRtt()`` has seen nothing yet."""

    estimate_ms: float | None = None
    window: tuple[float, ...] = ()

    @property
    def floor_ms(self) -> float | None:
        return min(self.window) if self.window else None


def spike_slack_ms(floor_ms: float) -> float:
    return SLACK_ABSOLUTE_MS + SLACK_RELATIVE * floor_ms


def update(state: RobustRtt, sample_ms: float | None, alpha: float) -> RobustRtt:
    """The state after one pooled sample (``None``: no pooled sample this probe, unchanged)."""
    if sample_ms is None:
        return state
    window = (*state.window, sample_ms)[-RTT_FLOOR_WINDOW:]
    floor = min(window)
    clamped = min(sample_ms, floor + spike_slack_ms(floor))
    previous = state.estimate_ms
    smoothed = clamped if previous is None else previous + alpha * (clamped - previous)
    return RobustRtt(estimate_ms=max(floor, min(smoothed, sample_ms)), window=window)
