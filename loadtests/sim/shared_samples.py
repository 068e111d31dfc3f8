"""Learning shared between the gateways of one region, as the gateway's shared state carries
it (gateway/state/sample_feeder.py, routing/peer_learning.py).

With ``state.share_learning`` (on whenever state is shared: Redis, or the workers of one
host), the first tokens one gateway's router learns from are published in its next flush and
fed to the routers of the other gateways of its region, each re-expressed in the receiver's
own learned frame. Without it, every gateway needs its own evidence: in scenario 6 each of
three gateways took its own three confirmations of a step.

``Signals.shared_learning_delay_s`` turns it on: a sample reaches the other gateways of the
sender's region that long after its first token (the flush and the pub/sub hop). Off (None)
by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.state.sample_feeder import peer_learner_of
from loadtests.sim.outbox import Outbox
from loadtests.sim.scenario import Scenario
from routing.learned_columns import LearnedFrame
from routing.types import FirstToken, Router


@dataclass(frozen=True, slots=True)
class _Published:
    first: FirstToken
    frame: LearnedFrame


class SharedSamples:
    """First tokens one gateway's router learned from, delivered to its region's others."""

    def __init__(self, scenario: Scenario, gateways: Sequence[str], routers: Sequence[Router]):
        delay = scenario.signals.shared_learning_delay_s
        self._learners = [peer_learner_of(router) for router in routers]
        self.active = delay is not None and any(self._learners)
        # Only the other gateways of the sender's region learn from its samples.
        self._outbox: Outbox[_Published] = Outbox(
            [[(delay or 0.0) if there == here else None for there in gateways] for here in gateways]
        )

    @property
    def pending(self) -> int:
        """Samples not delivered yet."""
        return self._outbox.pending

    def published(self, gateway: int, first: FirstToken, now: float) -> list[tuple[float, int]]:
        """Gateway ``gateway``'s router learned from ``first`` now: (time, ref) of each
        delivery to another gateway of its region, for :meth:`deliver`."""
        learner = self._learners[gateway]
        if not self.active or learner is None or not first.predicted_terms_ms:
            return []
        frame = learner.learned_frame(first.backend)
        if frame is None:
            return []
        return self._outbox.post(gateway, _Published(first, frame), now)

    def deliver(self, now: float, ref: int) -> None:
        """The sample ``ref`` names reaches its gateway's router."""
        del now  # learned at its first token's time, as the gateway's feeder converts it
        to_gateway, item = self._outbox.take(ref)
        learner = self._learners[to_gateway]
        if learner is not None:
            learner.observe_peer_first_token(item.first, item.frame)
