"""A request's life, shared by every door: the relay core's door-neutral parts.

- :mod:`.call` — :class:`~.call.CoreCall`, the seam object under every door: open (refusals
  counted once), a raw view (``batches``: per upstream read, for the HTTP/SSE door) and a
  parsed view (``events``: for the gRPC door) of the same exchange, and ``close``.
- :mod:`.core` — what a call is made of: accept, forward headers, and the
  :class:`~.core.Exchange` that ends a request once, with its outcome classified and counted.
- :mod:`.seam` — the event seam (``InferenceBackend``) under a door that renders parsed events
  (the gRPC servicer); the relay's implementation (``gateway/grpc/relay_backend.py``) is a
  :class:`~.call.CoreCall`'s parsed view.
- :mod:`.handles` — the request's resources as handles, released where the table says, once.
- :mod:`.live` — the requests the core holds now and their lifecycle state (admin status).
- :mod:`.states` — the states, events and transition table (sans-IO); what each state holds.
- :mod:`.outcome` — how a stream ended and what that means for the backend, decided once.

Files a new door touches: its own package (``gateway/doors/<name>/``) and one registration
line (``gateway/doors/routes.py`` for an HTTP door, ``gateway/grpc/mount.py`` for a gRPC
service). An HTTP door writes a ``DoorWire`` (``gateway/doors/wire.py``: its error shape,
whole body and stream events) and calls ``gateway.doors.sse_door.serve``; any other door
builds an :class:`~.core.Arrival` and a :class:`~.call.CoreCall`, renders one of its views in
its own format, says how it ended on ``call.exchange`` and closes it. Nothing
in this package, the relay, routing or observability changes (see :mod:`.call`).
"""
