"""What a learned scale was a while ago: samples that come back long after their decision are
judged against the scale that made their prediction.

A request's residual says how wrong its prediction was, and that prediction was made with the
scale of its decision, not today's. When the answer takes a while (scenario 9: a 2x overload,
22 s in the queue), a rescaling from today's value by a 22 s old ratio overshoots: the learned
queue scale swung between its bounds (0.25 and 4) with a period of about 50 s, and the
prediction with it (10 s to 180 s against a steady 22 s). So each learned scale keeps a short
log of its recent values, and a sample moves today's scale toward what its own decision's
scale should have been (that scale times the sample's ratio). With prompt answers the two
are the same.
"""

from __future__ import annotations

from bisect import bisect_right

_COALESCE_S = 0.5  # changes closer than this share one entry (the later value)
_CAP = 128  # entries kept: a minute or more of history at one change per half second


class ScaleLog:
    """A step function of time: ``_scale[i]`` held from ``_at[i]`` until ``_at[i + 1]``."""

    __slots__ = ("_at", "_scale")

    def __init__(self) -> None:
        self._at: list[float] = []
        self._scale: list[float] = []

    def record(self, at: float, before: float, after: float) -> None:
        """The scale moved from ``before`` to ``after`` at ``at``."""
        if not self._at:
            self._at.append(-float("inf"))
            self._scale.append(before)
        if at - self._at[-1] < _COALESCE_S:
            self._scale[-1] = after
        else:
            self._at.append(at)
            self._scale.append(after)
            if len(self._at) > _CAP:
                del self._at[0], self._scale[0]

    def at(self, when: float, current: float) -> float:
        """The scale at ``when`` (``current`` when nothing was logged, or it is older than the
        log: the closest known, the oldest entry, stands for it)."""
        if not self._at:
            return current
        i = bisect_right(self._at, when) - 1
        return self._scale[i if i >= 0 else 0]
