"""The region round-trip matrix that fleet files and simulator scenarios both carry:
``rtt_ms[a][b]`` in milliseconds, symmetric, one direction enough."""

from __future__ import annotations

from collections.abc import Collection, Mapping

RttMatrix = Mapping[str, Mapping[str, float]]


def lookup(rtt_ms: RttMatrix, a: str, b: str) -> float | None:
    forward = rtt_ms.get(a, {}).get(b)
    return forward if forward is not None else rtt_ms.get(b, {}).get(a)


def check(rtt_ms: RttMatrix, regions: Collection[str]) -> None:
    """Raise ValueError (naming the key) unless every pair of regions has a round trip >= 0."""
    known = set(regions)
    for a, row in rtt_ms.items():
        for b, value in row.items():
            if a not in known or b not in known:
                raise ValueError(f"rtt_ms.{a}.{b}: unknown region (regions: {sorted(known)})")
            if value < 0:
                raise ValueError(f"rtt_ms.{a}.{b}: must be >= 0, got {value}")
    for a in known:
        for b in known - {a}:
            if lookup(rtt_ms, a, b) is None:
                raise ValueError(f"rtt_ms: no round trip between {a} and {b}")
