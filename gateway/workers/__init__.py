"""``meridian serve --workers N``: one supervisor, N worker processes on one port.

- ``supervisor``: reserves the port, hosts the shared state (``gateway/state/host_server``),
  starts the workers, forwards SIGTERM/SIGINT (drain) and SIGHUP (reload), restarts a worker
  that dies.
- ``worker``: what a worker does differently from a lone ``meridian serve`` (a
  ``SO_REUSEPORT`` listener, the host store, a private Unix socket for its peers).
- ``metrics_view``: ``GET /metrics`` on any worker answers for all of them, each sample
  labelled ``worker``.
"""
