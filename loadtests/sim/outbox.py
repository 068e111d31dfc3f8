"""What one gateway publishes through the shared state, on its way to the others.

``SharedPrefixes``, ``SharedSamples`` and ``SharedInFlight`` each hand an item from one gateway
to some of the others after a delay per pair; the simulator schedules each delivery as an event
that carries a ref, and the ref finds the item again when the event fires.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from loadtests.sim.scenario import Scenario

T = TypeVar("T")


def store_delays(scenario: Scenario, gateways: Sequence[str], delay: float) -> list[list[float]]:
    """``delay`` (the flush and the pub/sub hop) plus half the round trip between each pair of
    gateways' regions (the store is in one of them): every other gateway hears every one."""
    return [[delay + scenario.rtt(a, b) / 2000.0 for b in gateways] for a in gateways]


class Outbox(Generic[T]):
    """``delays[sender][receiver]``: how long an item takes between them (None: never)."""

    def __init__(self, delays: Sequence[Sequence[float | None]]) -> None:
        self._delays = delays
        self._pending: dict[int, tuple[int, T]] = {}  # ref -> (receiver, item)
        self._next = 0

    @property
    def pending(self) -> int:
        """Items not delivered yet."""
        return len(self._pending)

    def post(self, sender: int, item: T, now: float) -> list[tuple[float, int]]:
        """(time, ref) of ``item``'s delivery to each gateway ``sender`` reaches but itself."""
        deliveries = []
        for receiver, delay in enumerate(self._delays[sender]):
            if receiver != sender and delay is not None:
                self._next += 1
                self._pending[self._next] = (receiver, item)
                deliveries.append((now + delay, self._next))
        return deliveries

    def take(self, ref: int) -> tuple[int, T]:
        """The receiver and item ``ref`` names (each ref is taken once)."""
        return self._pending.pop(ref)
