"""A relayed request's life as data, in the sans-IO manner of h11: states, events, one table.

Nothing here does I/O or reads a clock. :meth:`Lifecycle.handle` takes an event and returns
either the :class:`Transition` it causes — with the resources the relay core must acquire and
release for it, computed from what each state holds (:data:`HOLDS`) — or an
:class:`InvalidTransition` value: an event the current state does not accept is an error the
caller logs and answers, never a silent state and never an exception on the request path.

Attempts and hedges live inside ``awaiting_first_token``: ``attempt_started`` and
``attempt_failed`` keep the machine there and count live attempts; ``all_attempts_failed`` is
only valid once none is live. Every terminal state holds nothing, so a request that reached
one has released everything it acquired, whichever way it ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class State(StrEnum):
    ACCEPTED = "accepted"  # parsed and validated; nothing held yet
    ADMITTED = "admitted"  # holds its admission slots; no backend chosen
    ROUTING = "routing"  # routing on a fresh snapshot; the decision reserves the first choice
    AWAITING_FIRST_TOKEN = "awaiting_first_token"  # attempts (and hedges) in flight
    STREAMING = "streaming"  # the first token went to the client; relaying the rest
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({State.DONE, State.FAILED, State.CANCELLED})


class Event(StrEnum):
    ADMITTED = "admitted"  # the admission gates handed over their slots
    REFUSED = "refused"  # admission full (429/503), or the gateway is draining
    ROUTED = "routed"  # a decision with at least one candidate
    NO_BACKEND = "no_backend"  # a decision with none
    ATTEMPT_STARTED = "attempt_started"  # an attempt or a hedge went upstream
    ATTEMPT_FAILED = "attempt_failed"  # one attempt failed before its first token
    FIRST_TOKEN = "first_token"  # an attempt won; the others are cancelled
    ALL_ATTEMPTS_FAILED = "all_attempts_failed"  # no attempt left to try
    COMPLETED = "completed"  # the stream (or whole body) reached the client in full
    BROKEN = "broken"  # the stream broke after the first token
    DEADLINE = "deadline"  # the request's total budget passed
    DRAINED = "drained"  # the gateway's drain deadline ended it
    CLIENT_GONE = "client_gone"  # the client left (or was cut off as too slow)
    INTERNAL = "internal"  # an impossible state elsewhere: end it as the gateway's fault
    REJECTED = "rejected"  # a backend said the request itself is bad (400/413/422, a loop)


class Resource(StrEnum):
    ACTIVE = "active"  # RelayState.active: keeps a reloaded configuration alive
    DRAIN_MEMBERSHIP = "drain_membership"  # DrainState: what the drain waits for or ends
    ADMISSION_TICKET = "admission_ticket"  # the tenant's and model's admission slots
    ROUTER_RESERVATION = "router_reservation"  # the router's in-flight count (anti-herding)
    HUB_IN_FLIGHT = "hub_in_flight"  # the signal hub's in-flight count (and its replicas')
    IN_FLIGHT_GAUGE = "in_flight_gauge"  # meridian_in_flight
    UPSTREAM_RESPONSE = "upstream_response"  # the winning upstream connection


_BASE = frozenset({Resource.ACTIVE, Resource.DRAIN_MEMBERSHIP})
_ADMITTED = _BASE | {Resource.ADMISSION_TICKET}
_UPSTREAM = _ADMITTED | {Resource.ROUTER_RESERVATION, Resource.HUB_IN_FLIGHT}

# Which resources a request holds in each state. A transition acquires what the next state
# holds and this one does not, and releases the converse: nothing else acquires or releases.
HOLDS: dict[State, frozenset[Resource]] = {
    State.ACCEPTED: _BASE,
    State.ADMITTED: _ADMITTED,
    State.ROUTING: _ADMITTED,
    State.AWAITING_FIRST_TOKEN: _UPSTREAM | {Resource.IN_FLIGHT_GAUGE},
    State.STREAMING: _UPSTREAM | {Resource.IN_FLIGHT_GAUGE, Resource.UPSTREAM_RESPONSE},
    State.DONE: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
}

# Endings any live state accepts: the gateway or the client can end a request anywhere.
_ENDINGS = {
    Event.CLIENT_GONE: State.CANCELLED,
    Event.DRAINED: State.CANCELLED,
    Event.DEADLINE: State.FAILED,
    Event.INTERNAL: State.FAILED,
}

TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.ACCEPTED, Event.ADMITTED): State.ADMITTED,
    (State.ACCEPTED, Event.REFUSED): State.FAILED,
    (State.ADMITTED, Event.ROUTED): State.ROUTING,
    (State.ADMITTED, Event.NO_BACKEND): State.FAILED,
    (State.ROUTING, Event.ATTEMPT_STARTED): State.AWAITING_FIRST_TOKEN,
    (State.ROUTING, Event.ALL_ATTEMPTS_FAILED): State.FAILED,  # every candidate skipped
    (State.AWAITING_FIRST_TOKEN, Event.ATTEMPT_STARTED): State.AWAITING_FIRST_TOKEN,
    (State.AWAITING_FIRST_TOKEN, Event.ATTEMPT_FAILED): State.AWAITING_FIRST_TOKEN,
    (State.AWAITING_FIRST_TOKEN, Event.FIRST_TOKEN): State.STREAMING,
    (State.AWAITING_FIRST_TOKEN, Event.ALL_ATTEMPTS_FAILED): State.FAILED,
    (State.AWAITING_FIRST_TOKEN, Event.REJECTED): State.FAILED,
    (State.STREAMING, Event.COMPLETED): State.DONE,
    (State.STREAMING, Event.BROKEN): State.FAILED,
    **{
        (state, event): ending
        for state in State
        if state not in TERMINAL
        for event, ending in _ENDINGS.items()
    },
}


@dataclass(frozen=True, slots=True)
class Transition:
    before: State
    event: Event
    after: State
    acquire: frozenset[Resource]
    release: frozenset[Resource]


# Every transition's record, built once: it follows from the table and HOLDS alone, and a
# request makes four or more, each on its way to its first token.
_RECORDS: dict[tuple[State, Event], Transition] = {
    (before, event): Transition(
        before, event, after, HOLDS[after] - HOLDS[before], HOLDS[before] - HOLDS[after]
    )
    for (before, event), after in TRANSITIONS.items()
}


@dataclass(frozen=True, slots=True)
class InvalidTransition:
    """An event the state does not accept: the caller logs it (with the request id) and ends
    the request with a protocol-native internal error."""

    state: State
    event: Event
    reason: str

    def message(self) -> str:
        return f"event {self.event} is not valid in state {self.state}: {self.reason}"


class Lifecycle:
    """One request's state, and the live attempts inside ``awaiting_first_token``."""

    __slots__ = ("ended_from", "live_attempts", "state")

    def __init__(self) -> None:
        self.state = State.ACCEPTED
        self.live_attempts = 0
        self.ended_from: State | None = None  # the live state a terminal one was reached from

    @property
    def holds(self) -> frozenset[Resource]:
        return HOLDS[self.state]

    def handle(self, event: Event) -> Transition | InvalidTransition:
        record = _RECORDS.get((self.state, event))
        if record is None:
            return InvalidTransition(self.state, event, "no such transition")
        after = record.after
        if event is Event.ATTEMPT_FAILED and self.live_attempts == 0:
            return InvalidTransition(self.state, event, "no attempt is live")
        if (
            event is Event.ALL_ATTEMPTS_FAILED
            and self.state is State.AWAITING_FIRST_TOKEN
            and self.live_attempts
        ):
            return InvalidTransition(self.state, event, f"{self.live_attempts} attempt(s) live")
        if event is Event.ATTEMPT_STARTED:
            self.live_attempts += 1
        elif event is Event.ATTEMPT_FAILED:
            self.live_attempts -= 1
        elif after is not State.AWAITING_FIRST_TOKEN:
            self.live_attempts = 0  # the winner streams on; every other attempt is cancelled
        before = self.state
        self.state = after
        if after in TERMINAL:
            self.ended_from = before
        return record
