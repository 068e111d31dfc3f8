"""Prefix affinity shared between gateways, as the gateway's shared state carries it.

With ``state.backend: redis`` the gateway's ``SharedPrefixRouter`` (gateway/state/
router_bridge.py) publishes the prompt blocks of each request it routes, at the decision, to
the backend it chose (the same optimistic record its own router keeps), and every other
replica's ``RemotePrefixFeeder`` records what arrives into its router's prefix index with
``note_remote_prefix``. Without it, each gateway knows only what it sent itself: four gateways
warming one fleet from cold send one tenant's system prompt to four backends, each paying its
whole prefill, where the engines' caches would have served three of them.

``Signals.shared_prefix_delay_s`` turns it on: a decision's blocks reach another gateway's
router that long after it (the writer's flush and the pub/sub hop) plus half the round trip
between the two gateways' regions (the store is in one of them). Off (None) by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.state.router_bridge import prefix_recorder_of
from loadtests.sim.outbox import Outbox, store_delays
from loadtests.sim.scenario import Scenario
from routing.types import Router


@dataclass(frozen=True, slots=True)
class _Published:
    backend: str
    hashes: tuple[int, ...]
    at: float  # when it was published (the decision's time: the block's seen-at)


class SharedPrefixes:
    """Blocks published by one gateway's decisions, delivered to the others' routers."""

    def __init__(self, scenario: Scenario, gateways: Sequence[str], routers: Sequence[Router]):
        delay = scenario.signals.shared_prefix_delay_s
        self.active = delay is not None
        self._outbox: Outbox[_Published] = Outbox(store_delays(scenario, gateways, delay or 0.0))
        self._routers = routers

    @property
    def pending(self) -> int:
        """Publications not delivered yet."""
        return self._outbox.pending

    def published(
        self, gateway: int, backend: str, hashes: tuple[int, ...], now: float
    ) -> list[tuple[float, int]]:
        """Gateway ``gateway`` routed a prompt with ``hashes`` to ``backend`` now: (time,
        ref) of each delivery to another gateway, for :meth:`deliver`."""
        if not self.active or not hashes:
            return []
        return self._outbox.post(gateway, _Published(backend, hashes, now), now)

    def deliver(self, now: float, ref: int) -> None:
        """The blocks ``ref`` names reach their gateway's router (a policy without a prefix
        index takes nothing, as the gateway's ``prefix_recorder_of`` says)."""
        to_gateway, item = self._outbox.take(ref)
        recorder = prefix_recorder_of(self._routers[to_gateway])
        if recorder is not None:
            recorder.note_remote_prefix(item.backend, dict.fromkeys(item.hashes, item.at), now)
