"""Who is calling: API keys, tenants that come from the key, hop keys between gateways.

- :mod:`gateway.auth.config` — ``auth:`` in the operator file.
- :mod:`gateway.auth.keys` — the key format, its digest, :class:`~gateway.auth.keys.Principal`.
- :mod:`gateway.auth.authenticator` — header → principal (401), principal and model (403).
- :mod:`gateway.auth.redis_keys` — keys in Redis: add and revoke without a restart, across
  replicas; read by a background refresher, never on the request path.
- :mod:`gateway.auth.wiring` — the middleware and start-up (``install_auth``).

Nothing here is imported by ``gateway.config`` except the config module, so the package adds
no import cycle.
"""
