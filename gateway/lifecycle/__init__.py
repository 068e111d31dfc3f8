"""A request's life as data, shared by every door.

- :mod:`.states` — the states, events and transition table (sans-IO); what each state holds.
- :mod:`.outcome` — how a stream ended and what that means for the backend, decided once.

A new door (its own package, e.g. ``gateway/doors/<name>/``) touches: its package, one line
registering its routes (``gateway/doors/routes.py`` for HTTP doors; ``gateway/grpc/mount.py``
for a gRPC service), and nothing here: it parses into an ``InboundRequest``, calls
``Relay.open`` / ``Relay.finish`` with the :class:`~.outcome.Ending`'s ``FailureKind``, and
renders what it gets back in its own wire format.
"""
