"""One request through the relay core: the seam object every door stands on.

A door builds an :class:`~gateway.lifecycle.core.Arrival`, makes a :class:`CoreCall` and:

1. ``await call.open()`` — accept, route and walk to a first token. A refusal (any
   :class:`~gateway.errors.ApiError`, an impossible state, the call's own deadline) is counted
   and logged once, here, and raised as the :class:`ApiError` the door renders in its format.
2. reads the exchange through one of two views of the same upstream stream:
   :meth:`CoreCall.batches` — the raw, pass-through view, one list of events per upstream read
   (the HTTP/SSE door writes each list in one write, the bytes as they came) — or
   :meth:`CoreCall.events` — the same events one by one (the gRPC door parses each into a
   message). Neither adds a generator layer: they are the exchange's own iterators, so the
   per-event cost is the same as reading the exchange directly.
3. tells :attr:`CoreCall.exchange` how the stream ended (``completed``, ``broke``, ...), the one
   outcome classification (:mod:`gateway.lifecycle.outcome`), and
4. ``call.close()`` in a ``finally`` — whatever happened: rendered, broken, the client gone in
   the instant the open finished. It releases everything and counts ``meridian_requests_total``
   once; before an open finished it does nothing (the relay core released it all already, and
   ``open`` counted the request: refused, or cancelled when the client left before a token).

The relay's :class:`~gateway.lifecycle.seam.InferenceBackend` (``gateway/grpc/relay_backend.py``)
is :meth:`CoreCall.events` rendered as seam events; the HTTP/SSE door
(``gateway/doors/sse_door.py``) is :meth:`CoreCall.batches` written as SSE.

Files a new door touches: its own package (``gateway/doors/<name>/``) and one registration
line (``gateway/doors/routes.py`` for HTTP, ``gateway/grpc/mount.py`` for gRPC). An HTTP door
usually writes only a :class:`~gateway.doors.wire.DoorWire`; another door builds an
:class:`~gateway.lifecycle.core.Arrival` and a :class:`CoreCall`. Nothing here, in the relay,
routing or observability changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from gateway.errors import ApiError
from gateway.impossible import ImpossibleState, internal_error
from gateway.inbound import InboundRequest
from gateway.lifecycle.core import Arrival, Exchange, accept, count, forward_headers, refused
from gateway.opened_stream import OpenedStream
from gateway.signals.outlier import FailureKind
from gateway.sse import SseEvent

if TYPE_CHECKING:
    from gateway.push_phase import Pusher
    from gateway.relay import Relay

Check = Callable[[InboundRequest], None]
CANCELLED = FailureKind.CANCELLED


def _deadline_error() -> ApiError:
    message = "the call's deadline passed before any backend produced a first token"
    return ApiError(504, message, "server_error", "deadline_exceeded")


class CoreCall:
    """One request from its arrival to its end, for any door; see the module doc."""

    __slots__ = ("_exchange", "arrival", "check", "inbound", "relay")

    def __init__(self, relay: Relay, arrival: Arrival, check: Check | None = None) -> None:
        self.relay, self.arrival, self.check = relay, arrival, check
        self.inbound: InboundRequest | None = None  # once parsed
        self._exchange: Exchange | None = None  # once a first token won

    @property
    def exchange(self) -> Exchange:
        """The request from its first token on: where the door says how the stream ended."""
        if self._exchange is None:
            raise ImpossibleState("the call's exchange was used before it opened")
        return self._exchange

    @property
    def opened(self) -> OpenedStream:
        return self.exchange.opened

    @property
    def started(self) -> bool:
        """Whether an attempt won: from then on :meth:`close` ends (and counts) the request."""
        return self._exchange is not None

    def accept(self) -> InboundRequest:
        """Parse and validate (the door's ``check`` included); raises the refusal (counted)."""
        if self.inbound is not None:
            return self.inbound
        try:
            self.inbound = accept(self.relay, self.arrival, self.check)
        except ApiError as refusal:
            self._refuse(refusal)
            raise
        except ImpossibleState as exc:
            raise self.impossible(exc) from None
        return self.inbound

    async def open(self) -> OpenedStream:
        """Admit, route and walk until a first token; raises the refusal (counted)."""
        arrival = self.arrival
        inbound = self.accept()
        try:
            forward = forward_headers(arrival, inbound)
            # A gRPC client's deadline bounds routing and every attempt; after the first token
            # gRPC itself enforces it by cancelling the call. HTTP has none (None: no bound,
            # and no timeout scope: its five Python calls are on every request's first token).
            if arrival.timeout_s is None:
                opened = await self.relay.open(inbound, forward, door=arrival.door)
            else:
                async with asyncio.timeout(arrival.timeout_s):
                    opened = await self.relay.open(inbound, forward, door=arrival.door)
        except ApiError as refusal:
            self._refuse(refusal)
            raise
        except TimeoutError:
            if arrival.timeout_s is None:
                raise
            error = _deadline_error()
            self._refuse(error)
            raise error from None
        except asyncio.CancelledError:
            # The client left (or its door closed) before a first token: the relay core
            # released everything; counted once here, as an exchange that ends cancelled is.
            count(self.relay, arrival.door, arrival.endpoint, inbound.model, CANCELLED.value)
            raise
        except Exception as exc:
            # An impossible state, or a bug below the door (a routing invariant): never a
            # crash of the handler (internal_error logs a bug's traceback).
            raise self.impossible(exc) from None
        self._exchange = Exchange(self.relay, arrival, inbound, opened)
        return opened

    def impossible(self, exc: Exception) -> ApiError:
        """An impossible state before the first token: logged, counted, the client's error."""
        error = internal_error(self.arrival.request_id, self.arrival.door, exc)
        self._refuse(error)
        return error

    def _refuse(self, error: ApiError) -> None:
        a = self.arrival
        refused(self.relay, a.door, a.endpoint, a.request_id, a.received_at, self.inbound, error)

    def batches(self, push: Pusher | None = None) -> AsyncIterator[list[SseEvent]]:
        """The raw view: the stream's events grouped by the upstream read that brought them
        (``push``: written as they flow by the door's pusher, ``gateway/push_phase.py``)."""
        return self.opened.exchange.all_batches(push)

    def events(self) -> AsyncIterator[SseEvent]:
        """The parsed view's source: the same stream's events one at a time."""
        return self.opened.exchange.all_events()

    def close(self) -> None:
        """End the request (released, learned from, counted once); a no-op before it opened."""
        if self._exchange is not None:
            self._exchange.close()
