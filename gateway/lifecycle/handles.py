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
  ticket. The lifecycle table drives their release: :meth:`RequestHold.on` carries out each
  transition's release set (with the winning attempt's :class:`UpstreamHold`), in one
  function, :meth:`RequestHold._release`; :meth:`RequestHold.end` is only the backstop.

Nothing else in the gateway enters or leaves these counts; the "every counter back to zero"
test (``tests/reliability/test_counters_return_to_zero.py``) drives every path through here,
and ``tests/unit/test_lifecycle_handles.py`` checks that the real counters follow the table.

Places in ``gateway/`` that acquire or release a request resource (the grep in
``docs/streams.md``, "Where resources are taken and given back"): 26 at db5372a, 28 at the
start of session 3, 12 since — 10 of them in this module. Every release is in two
functions: :meth:`RequestHold._release` and :meth:`UpstreamHold.end`; every acquisition in
three: :func:`hold_request`, :meth:`RequestHold.admit` and :func:`hold_upstream`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import Gauge

from gateway.lifecycle.live import LiveRequests
from gateway.lifecycle.states import (
    HOLDS,
    TERMINAL,
    Event,
    InvalidTransition,
    Lifecycle,
    Resource,
    State,
)
from gateway.signals.outlier import FailureKind
from routing.reservation import Reservation
from routing.types import Observation

if TYPE_CHECKING:
    from gateway.admission import Admission, Ticket
    from gateway.drain import DrainState
    from gateway.metrics import GatewayMetrics
    from gateway.opened_stream import OpenedStream
    from gateway.relay_state import RelayState
    from gateway.signals.hub import SignalHub

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
    gauge = metrics.in_flight_of[name]
    gauge.inc()
    return UpstreamHold(reservation, fleet, gauge)


# The order in which a transition's releases are carried out: the upstream attempt first (its
# outcome reaches outlier detection and the learner), then the admission slots (a queued
# request may start), then the state and the drain (a drain or a retiring config may finish).
_RELEASE_ORDER = (
    Resource.UPSTREAM_RESPONSE,
    Resource.ROUTER_RESERVATION,
    Resource.HUB_IN_FLIGHT,
    Resource.IN_FLIGHT_GAUGE,
    Resource.ADMISSION_TICKET,
    Resource.ACTIVE,
    Resource.DRAIN_MEMBERSHIP,
)
_UPSTREAM = frozenset(_RELEASE_ORDER[:4])  # one UpstreamHold: the winner's, once streaming


@dataclass(eq=False, slots=True)
class RequestHold:
    """What one request holds in the relay core until :meth:`end`; see the module doc.

    The lifecycle table drives it: every event goes through :meth:`on`, and the resources the
    transition releases (:attr:`Transition.release <gateway.lifecycle.states.Transition>`) are
    released there and only there. :meth:`end` is the backstop — whatever is still held when
    the request is over (an event its state refused) is released too, and logged as the
    impossible state it is."""

    state: RelayState
    drain: DrainState
    timer: asyncio.Timeout  # the first-token phase's deadline: what a drain can fire early
    ticket: Ticket | None = None
    stream: OpenedStream | None = None  # once a first token won: what a drain can abort
    upstream: UpstreamHold | None = None  # the winning attempt's counts, from then on
    ended: bool = False
    request_id: str = ""
    lifecycle: Lifecycle = field(default_factory=Lifecycle)  # where the request is (states.py)
    holding: set[Resource] = field(default_factory=lambda: set(HOLDS[State.ACCEPTED]))
    live: LiveRequests | None = None  # the relay's registry of live requests (live.py)
    started_at: float = field(default_factory=time.perf_counter)

    def on(
        self,
        event: Event,
        failure: FailureKind | None = None,
        observation: Observation | None = None,
    ) -> None:
        """Move the request's lifecycle and carry out what the transition acquires and
        releases (``failure`` and ``observation`` end the winner's attempt: UpstreamHold.end).
        An event its state does not accept is logged with the request id, never raised."""
        result = self.lifecycle.handle(event)
        if isinstance(result, InvalidTransition):
            log.error("lifecycle request_id=%s: %s", self.request_id, result.message())
            return
        self.holding |= result.acquire
        for resource in _RELEASE_ORDER:
            if resource in result.release:
                self._release(resource, failure, observation)
        if result.after in TERMINAL and self.live is not None:
            self.live.discard(self)

    def _release(
        self, resource: Resource, failure: FailureKind | None, observation: Observation | None
    ) -> None:
        if resource not in self.holding:
            return
        self.holding.discard(resource)
        if resource in _UPSTREAM:
            # Before a first token each attempt ends its own UpstreamHold (attempt.py); from
            # the first token on the winner's is the request's.
            if self.upstream is not None:
                self.upstream.end(failure, observation)
            if resource is Resource.UPSTREAM_RESPONSE and self.stream is not None:
                self.stream.close()
        elif resource is Resource.ADMISSION_TICKET:
            if self.ticket is not None:
                self.ticket.release()
        elif resource is Resource.ACTIVE:
            self.state.leave()
        elif self.stream is None:  # drain membership: the first-token timer, or the stream
            self.drain.opened(self.timer, None)
        else:
            self.drain.finished(self.stream)

    def end_with(self, event: Event) -> None:
        """The request ended before a first token with ``event``, unless already ended."""
        if self.lifecycle.state not in TERMINAL:
            self.on(event)

    async def admit(self, admission: Admission, model: str, tenant: str) -> None:
        """Wait for the admission slots (or raise the refusal); held until the request ends."""
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
        """The request is over (its response, or its failure before one): the ending event
        releases everything (the winner's counts end with ``failure`` and ``observation``)."""
        if self.stream is not None and self.lifecycle.state not in TERMINAL:
            event = Event.COMPLETED if failure is None else _ENDED_BY.get(error, Event.BROKEN)
            self.on(event, failure, observation)
        if self.ended:
            return
        self.ended = True
        if self.live is not None:
            self.live.discard(self)
        if self.holding:  # the table should have released everything: say so, then release it
            names = ", ".join(sorted(self.holding))
            log.error(
                "lifecycle request_id=%s: ended in %s still holding %s",
                self.request_id,
                self.lifecycle.state,
                names,
            )
            for resource in _RELEASE_ORDER:
                self._release(resource, failure, observation)
        # The stream holds this hold (``OpenedStream.held``): letting go of it breaks the
        # cycle, so the request's objects are freed now by reference counting, not later by
        # a collection that pauses every stream (docs/results/perf-issue16.md, session 19).
        self.stream = None


def hold_request(
    state: RelayState,
    drain: DrainState,
    timer: asyncio.Timeout,
    request_id: str,
    live: LiveRequests | None = None,
) -> RequestHold:
    """The relay core takes a request: it counts on its state and in the drain from now (and
    among the ``live`` requests, until it ends)."""
    state.enter()
    drain.opening(timer)
    hold = RequestHold(state, drain, timer, request_id=request_id, live=live)
    if live is not None:
        live.add(hold)
    return hold
