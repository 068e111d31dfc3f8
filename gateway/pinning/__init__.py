"""DNS pinning of backend addresses: a DNS answer that changes cannot redirect traffic.

- :mod:`gateway.pinning.config` — ``dns:`` in the operator file.
- :mod:`gateway.pinning.policy` — which answers a host may take (pure).
- :mod:`gateway.pinning.pins` — the pinned addresses, the aiohttp resolver that serves them to
  every upstream connection, the refresh off the request path.
- :mod:`gateway.pinning.wiring` — resolve at start (refusing to start on a link-local answer),
  then every ``dns.refresh_s``.
"""
