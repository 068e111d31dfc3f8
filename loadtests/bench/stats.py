"""The statistics the report quotes, with one percentile method used everywhere.

Percentiles use **linear interpolation between closest ranks** (Hyndman & Fan type 7, numpy's
default ``method="linear"``, also what vLLM's ``benchmark_serving`` and Excel's PERCENTILE.INC
report): for ``n`` sorted values ``x[0..n-1]`` and ``q`` in [0, 100], let ``h = (n - 1) * q / 100``;
the percentile is ``x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])``. So p0 is the
minimum, p100 the maximum, and p50 of an even count is the mean of the two middle values.
An empty sample has no percentiles (``None``), never a made-up zero.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

QUANTILES: tuple[float, ...] = (50.0, 90.0, 99.0)


def percentile(values: Sequence[float] | npt.NDArray[np.float64], q: float) -> float | None:
    """The ``q``-th percentile (0..100) by linear interpolation; ``None`` for no values."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within [0, 100], got {q}")
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="linear"))


@dataclass(frozen=True)
class Distribution:
    """Summary of one latency sample, in the unit it was given (the report uses milliseconds)."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float] | npt.NDArray[np.float64]) -> Distribution:
        array = np.asarray(values, dtype=np.float64)
        if array.size == 0:
            return cls(0, None, None, None, None, None)
        p50, p90, p99 = (float(v) for v in np.percentile(array, QUANTILES, method="linear"))
        return cls(int(array.size), float(array.mean()), p50, p90, p99, float(array.max()))

    def scaled(self, factor: float) -> Distribution:
        """The same summary in another unit (e.g. seconds -> milliseconds with 1000)."""

        def scale(value: float | None) -> float | None:
            return None if value is None else value * factor

        return Distribution(
            self.count,
            scale(self.mean),
            scale(self.p50),
            scale(self.p90),
            scale(self.p99),
            scale(self.max),
        )


def inter_token_gaps(token_times: Sequence[float]) -> tuple[float, ...]:
    """Gaps between consecutive token-carrying chunks; the first token's wait is TTFT, not ITL."""
    return tuple(later - earlier for earlier, later in itertools.pairwise(token_times))


def rate(count: float, duration_s: float) -> float:
    """Events per second over a window; zero for an empty window rather than a division error."""
    return count / duration_s if duration_s > 0 else 0.0


@dataclass(frozen=True)
class Slo:
    """A service-level objective a single request meets or misses (``None`` = no bound)."""

    ttft_ms: float | None = None
    itl_p99_ms: float | None = None

    def is_met(self, ttft_s: float | None, itl_gaps_s: Sequence[float]) -> bool:
        """Met when the request produced a first token within the TTFT bound and the p99 of its
        own inter-token gaps is within the ITL bound (a request with one token has no gaps)."""
        if ttft_s is None:
            return False
        if self.ttft_ms is not None and ttft_s * 1000.0 > self.ttft_ms:
            return False
        if self.itl_p99_ms is not None and itl_gaps_s:
            itl_p99 = percentile(itl_gaps_s, 99.0)
            if itl_p99 is not None and itl_p99 * 1000.0 > self.itl_p99_ms:
                return False
        return True


def flatten(groups: Iterable[Sequence[float]]) -> npt.NDArray[np.float64]:
    """All values of many per-request samples in one array (ITL gaps of every request)."""
    parts = [np.asarray(group, dtype=np.float64) for group in groups if len(group)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.float64)
