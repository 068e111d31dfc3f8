"""In-flight counts shared between gateways, as the gateway's shared state carries them.

With shared state (``state.backend: redis``, or the workers of one host through their
coordinator) every replica publishes its open requests per backend in its next flush, and the
others' snapshots carry them: ``in_flight`` is the tier's total and ``others_in_flight`` the
other replicas' part (gateway/state/fleet_bridge.py). The router counts the others' requests
sent since the last scrape as it counts its own (routing/load.py). Without it, each gateway
knows only its own, and two gateways that share every other signal both send the next request
to the backend that looked emptiest at the scrape.

``Signals.shared_in_flight_delay_s`` turns it on: a change of one gateway's count reaches
another gateway that long after it (the flush and the pub/sub hop) plus half the round trip
between their regions (the store is in one of them). Off (None) by default.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadtests.sim.outbox import Outbox, store_delays
from loadtests.sim.scenario import Scenario
from loadtests.sim.signals import SignalModel


class SharedInFlight:
    """Changes of one gateway's open requests, delivered to the other gateways."""

    def __init__(self, scenario: Scenario, gateways: Sequence[str], signals: SignalModel) -> None:
        delay = scenario.signals.shared_in_flight_delay_s
        self._signals = signals
        self.active = delay is not None
        # Each item: (backend, delta).
        self._outbox: Outbox[tuple[int, int]] = Outbox(
            store_delays(scenario, gateways, delay or 0.0)
        )

    @property
    def pending(self) -> int:
        """Changes not delivered yet."""
        return self._outbox.pending

    def published(
        self, gateway: int, backend: int, delta: int, now: float
    ) -> list[tuple[float, int]]:
        """Gateway ``gateway``'s open requests to ``backend`` moved by ``delta`` now: (time,
        ref) of each delivery to another gateway, for :meth:`deliver`."""
        if not self.active:
            return []
        return self._outbox.post(gateway, (backend, delta), now)

    def deliver(self, now: float, ref: int) -> None:
        """The change ``ref`` names reaches its gateway's snapshot (as of its delivery, as the
        gateway's shared view holds it)."""
        del now
        to_gateway, (backend, delta) = self._outbox.take(ref)
        self._signals.others_moved(to_gateway, backend, delta)
