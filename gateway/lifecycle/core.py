"""The relay core's door-neutral calls: every door (HTTP/SSE, gRPC, Messages, Responses, ...)
takes a request into the core and out of it through these, and nothing else.

1. :func:`accept` — the request's bytes and what the transport knows (:class:`Arrival`) become
   an :class:`~gateway.inbound.InboundRequest` with its objective: parsed, located, validated
   (the door's own checks — an API key's scope, a quota — run in between, via ``check``).
2. :func:`forward_headers` — what every hop sends upstream (request id, the tenant a chained
   gateway believes from a hop key, the door's pass-through headers).
3. ``Relay.open`` — the relay walks the ranked candidates until one produces a first token;
   a refusal is counted once (:func:`refused`: ``meridian_requests_total``) and logged.
4. :class:`Exchange` — the request from its first token to its end. The door says what
   happened (:meth:`~Exchange.completed`, :meth:`~Exchange.broke`, ...); :meth:`Exchange.close`
   classifies it once (:mod:`gateway.lifecycle.outcome`), releases every resource
   (``Relay.finish``, :mod:`gateway.lifecycle.handles`) and counts the outcome — identically
   for every door, so metrics, learning and outlier detection cannot disagree between doors.

Doors do not call these one by one: :class:`gateway.lifecycle.call.CoreCall` strings them
together (and says which files a new door touches).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.errors import ApiError
from gateway.inbound import Endpoint, InboundRequest, parse_inbound
from gateway.lifecycle.outcome import Ending, against_backend, broken_ending
from gateway.objectives import apply as apply_objective
from gateway.opened_stream import OpenedStream
from gateway.signals.outlier import FailureKind
from gateway.stream import StreamBroken

if TYPE_CHECKING:
    from gateway.relay import Relay

log = logging.getLogger("meridian.core")

TENANT_HEADER = "X-Meridian-Tenant"


@dataclass(frozen=True, slots=True)
class Arrival:
    """A request as a door hands it to the core, before anything is parsed."""

    door: str  # "http" | "grpc": the label on every metric and log line
    endpoint: Endpoint
    body: bytes  # the JSON body, as the HTTP door would receive it
    request_id: str
    tenant: str  # from the API key (gateway/auth), never from a client-chosen header
    received_at: float  # time.perf_counter() when the request arrived
    peer: str | None = None  # the client's address as the transport saw it
    forwarded_for: Sequence[str] | None = None  # X-Forwarded-For (trusted only per config)
    headers: Mapping[str, str] | None = None  # objective headers (HTTP only)
    timeout_s: float | None = None  # what is left of a gRPC deadline
    key_id: str | None = None  # the API key the request came with (its objective class)
    forward: Mapping[str, str] = field(default_factory=dict)  # the door's pass-through headers


def accept(
    relay: Relay, arrival: Arrival, check: Callable[[InboundRequest], None] | None = None
) -> InboundRequest:
    """Parse ``arrival`` (raises the 4xx :class:`ApiError`); ``check`` is the door's own
    admission (key scope, quota), run on the parsed request before its objective is set."""
    client = relay.fleet.locate(arrival.peer, arrival.forwarded_for)
    inbound = parse_inbound(
        arrival.endpoint,
        arrival.body,
        request_id=arrival.request_id,
        tenant=arrival.tenant,
        origin=client.origin,
        known_models=relay.known_models,
        received_at=arrival.received_at,
    )
    if check is not None:
        check(inbound)
    return apply_objective(
        inbound, relay.config.objectives, arrival.headers, arrival.timeout_s, arrival.key_id
    )


def forward_headers(arrival: Arrival, inbound: InboundRequest) -> dict[str, str]:
    """Headers every upstream attempt carries: the door's, the request id and the tenant (a
    chained gateway believes it from a hop key, the backend's api_key)."""
    headers = {"X-Request-Id": inbound.request_id, **arrival.forward}
    headers[TENANT_HEADER] = inbound.profile.tenant
    return headers


def count(relay: Relay, door: str, endpoint: Endpoint, model: str, outcome: str) -> None:
    """``meridian_requests_total``: once per request, whichever way it ended."""
    relay.metrics.requests_of[door, endpoint._value_, model, outcome].inc()


def refused(
    relay: Relay,
    door: str,
    endpoint: Endpoint,
    request_id: str,
    received_at: float,
    inbound: InboundRequest | None,
    error: ApiError,
) -> None:
    """The request ended before a first token with ``error``: counted once (and logged as a
    rejection when it was refused before the relay core saw it)."""
    model = inbound.model if inbound is not None else "unknown"
    count(relay, door, endpoint, model, str(error.status))
    if inbound is None:
        relay.observer.rejected(door, endpoint.value, request_id, error, received_at)


class Exchange:
    """One request from its first token to its end; :meth:`close` ends it, once."""

    __slots__ = ("_closed", "door", "ending", "endpoint", "error", "inbound", "opened", "relay")

    def __init__(
        self, relay: Relay, arrival: Arrival, inbound: InboundRequest, opened: OpenedStream
    ) -> None:
        self.relay, self.inbound, self.opened = relay, inbound, opened
        self.door, self.endpoint = arrival.door, arrival.endpoint
        # Until the door says otherwise the client went away (it left, or the door was closed).
        self.ending = Ending.CLIENT_CANCELLED
        self.error: str | None = None  # the kind of a stream that broke, for the request log
        self._closed = False

    @property
    def failure(self) -> FailureKind | None:
        """How the ending counts against the backend (None: a success)."""
        return against_backend(self.ending)

    def completed(self) -> None:
        self.ending = Ending.COMPLETED

    def broke(self, broken: StreamBroken) -> None:
        """The stream broke after its first token: logged, counted, classified."""
        backend = self.opened.route.backend
        level = logging.ERROR if broken.kind == "internal_error" else logging.WARNING
        log.log(
            level,
            "stream broke door=%s request_id=%s backend=%s kind=%s",
            self.door,
            self.inbound.request_id,
            backend,
            broken.kind,
        )
        self.relay.metrics.stream_errors.labels(backend, broken.kind).inc()
        self.ended_by(broken.kind)

    def ended_by(self, kind: str) -> None:
        """The stream ended with a ``StreamBroken`` kind the door already reported."""
        self.ending, self.error = broken_ending(kind), kind

    def client_too_slow(self, reason: object) -> None:
        backend = self.opened.route.backend
        log.warning("client too slow backend=%s: %s", backend, reason)
        self.relay.metrics.stream_errors.labels(backend, "client_too_slow").inc()
        self.ending, self.error = Ending.CLIENT_CANCELLED, "client_too_slow"

    def internal(self) -> None:
        """An impossible state in the door: the gateway's fault, never the backend's."""
        self.ending, self.error = Ending.INTERNAL, "internal_error"

    def close(self) -> FailureKind | None:
        """Release everything the request holds, teach routing, count the outcome; once."""
        failure = self.failure
        if self._closed:
            return failure
        self._closed = True
        self.relay.finish(self.inbound, self.opened, time.perf_counter(), failure, self.error)
        outcome = "200" if failure is None else failure.value
        count(self.relay, self.door, self.endpoint, self.inbound.model, outcome)
        return failure
