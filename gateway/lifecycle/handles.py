"""A request's resources as handles: each acquired in one place and released in one place, once.

The resources of :data:`gateway.lifecycle.states.HOLDS`, grouped by who holds them:

- :class:`UpstreamHold` — one attempt's counts on its backend: the router's
  :class:`~routing.reservation.Reservation`, the signal hub's in-flight count and the
  ``meridian_upstream_in_flight`` gauge. Acquired together when the attempt goes upstream
  (:func:`hold_upstream`), ended together by :meth:`UpstreamHold.end` with the attempt's
  outcome — whatever the exit path, and however many times it is called.
- :class:`RequestHold` — what the request holds from the moment the relay core takes it until
  its response is over: the relay state's ``active`` count (a reloaded configuration stays
  alive for it), its drain membership (first-token phase, then its stream) and its admission
  ticket. :meth:`RequestHold.end` releases all of them and the winning attempt's
  :class:`UpstreamHold`: the request's one release.

Nothing else in the gateway enters or leaves these counts; the "every counter back to zero"
test (``tests/reliability/test_counters_return_to_zero.py``) drives every path through here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import Gauge

from gateway.lifecycle.states import TERMINAL, Event, InvalidTransition, Lifecycle
from gateway.signals.outlier import FailureKind
from routing.reservation import Reservation
from routing.types import Observation

if TYPE_CHECKING:
    from gateway.admission import Admission, Ticket
    from gateway.drain import DrainState
    from gateway.metrics import GatewayMetrics
    from gateway.relay_state import RelayState
    from gateway.signals.hub import SignalHub
    from gateway.stream import OpenedStream

log = logging.getLogger("meridian.lifecycle")

# How a request that reached Relay.finish ended (its StreamBroken kind, if any) -> the event.
_ENDED_BY: dict[str | None, Event] = {
    None: Event.CLIENT_GONE,
    "client_too_slow": Event.CLIENT_GONE,
    "gateway_draining": Event.DRAINED,
    "deadline_exceeded": Event.DEADLINE,
    "internal_error": Event.INTERNAL,
}


@dataclass(eq=False, slots=True)
class UpstreamHold:
    """One attempt's counts on its backend; :meth:`end` gives them all back, once."""

    reservation: Reservation
    fleet: SignalHub
    gauge: Gauge  # meridian_upstream_in_flight{backend}
    ended: bool = False

    @property
    def backend(self) -> str:
        return self.reservation.backend

    def end(self, failure: FailureKind | None, observation: Observation | None = None) -> None:
        """The attempt is over: ``failure`` (None = success) goes to the hub's outlier
        detection; ``observation`` settles the router's reservation (None: released, nothing
        learned — the client left, a hedge lost, the request was bad)."""
        if self.ended:
            return
        self.ended = True
        self.gauge.dec()
        self.fleet.on_request_end(self.backend, failure is None, failure)
        if observation is None:
            self.reservation.release()
        else:
            self.fleet.arrivals.answered(self.backend, observation.cached_tokens)  # its hits
            self.reservation.settle(observation)


def hold_upstream(
    reservation: Reservation, fleet: SignalHub, metrics: GatewayMetrics, prompt_tokens: int = 0
) -> UpstreamHold:
    """An attempt goes upstream on ``reservation``'s backend: count it everywhere at once."""
    name = reservation.backend
    fleet.on_request_start(name)
    fleet.arrivals.sent(name, prompt_tokens)
    gauge = metrics.in_flight.labels(name)
    gauge.inc()
    return UpstreamHold(reservation, fleet, gauge)


@dataclass(eq=False, slots=True)
class RequestHold:
    """What one request holds in the relay core until :meth:`end`; see the module doc."""

    state: RelayState
    drain: DrainState
    timer: asyncio.Timeout  # the first-token phase's deadline: what a drain can fire early
    ticket: Ticket | None = None
    stream: OpenedStream | None = None  # once a first token won: what a drain can abort
    upstream: UpstreamHold | None = None  # the winning attempt's counts, from then on
    ended: bool = False
    request_id: str = ""
    lifecycle: Lifecycle = field(default_factory=Lifecycle)  # where the request is (states.py)

    def on(self, event: Event) -> None:
        """Move the request's lifecycle; an event its state does not accept is logged as the
        impossible state it is (with the request id), never raised on the request path."""
        result = self.lifecycle.handle(event)
        if isinstance(result, InvalidTransition):
            log.error("lifecycle request_id=%s: %s", self.request_id, result.message())

    def end_with(self, event: Event) -> None:
        """The request ended before a first token with ``event``, unless already ended."""
        if self.lifecycle.state not in TERMINAL:
            self.on(event)

    async def admit(self, admission: Admission, model: str, tenant: str) -> None:
        """Wait for the admission slots (or raise the refusal); held until :meth:`end`."""
        self.ticket = await admission.admit(model, tenant)
        self.on(Event.ADMITTED)

    def streaming(self, stream: OpenedStream) -> None:
        """The first token won: drain membership moves from the timer to the stream, and the
        winning attempt's counts are this request's to end."""
        self.stream = stream
        self.upstream = stream.upstream_hold
        self.on(Event.FIRST_TOKEN)
        self.drain.opened(self.timer, stream)

    def end(
        self,
        failure: FailureKind | None = None,
        observation: Observation | None = None,
        error: str | None = None,
    ) -> None:
        """The request is over (its response, or its failure before one): release all; the
        winner's counts end with ``failure`` and ``observation`` (see UpstreamHold.end)."""
        if self.stream is not None and self.lifecycle.state not in TERMINAL:
            self.on(Event.COMPLETED if failure is None else _ENDED_BY.get(error, Event.BROKEN))
        if self.upstream is not None:
            self.upstream.end(failure, observation)
        if self.ended:
            return
        self.ended = True
        if self.ticket is not None:
            self.ticket.release()
        self.state.leave()
        if self.stream is None:
            self.drain.opened(self.timer, None)
        else:
            self.drain.finished(self.stream)


def hold_request(
    state: RelayState, drain: DrainState, timer: asyncio.Timeout, request_id: str
) -> RequestHold:
    """The relay core takes a request: it counts on its state and in the drain from now."""
    state.enter()
    drain.opening(timer)
    return RequestHold(state, drain, timer, request_id=request_id)
