"""A request's life, shared by every door: the relay core's door-neutral parts.

- :mod:`.core` — the calls every door goes through: accept, forward headers, open, and the
  :class:`~.core.Exchange` that ends a request once, with its outcome classified and counted.
- :mod:`.seam` — the event seam (``InferenceBackend``) under a door that renders parsed events
  (the gRPC servicer), implemented over the core by ``gateway/grpc/relay_backend.py``.
- :mod:`.handles` — the request's resources as handles, each released in one place, once.
- :mod:`.states` — the states, events and transition table (sans-IO); what each state holds.
- :mod:`.outcome` — how a stream ended and what that means for the backend, decided once.

Files a new door touches: its own package (``gateway/doors/<name>/``) and one registration
line (``gateway/doors/routes.py`` for an HTTP door, ``gateway/grpc/mount.py`` for a gRPC
service). An HTTP door writes a ``DoorWire`` (``gateway/doors/wire.py``: its error shape,
whole body and stream events) and calls ``gateway.doors.sse_door.serve``; any other door
builds an :class:`~.core.Arrival`, calls :func:`~.core.accept` and ``Relay.open``, renders
the ``OpenedStream`` in its own format and ends it with an :class:`~.core.Exchange`. Nothing
in this package, the relay, routing or observability changes (see :mod:`.core`).
"""
