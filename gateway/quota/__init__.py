"""Quotas per API key and per tenant: requests per second and tokens per minute.

- :mod:`gateway.quota.config` — ``quotas:`` in the operator file.
- :mod:`gateway.quota.bucket` — a token bucket on an injected clock (pure).
- :mod:`gateway.quota.limiter` — the buckets of every key and tenant, bounded and expiring;
  ``admit`` before any upstream call (429 with ``Retry-After`` and ``x-ratelimit-*``),
  ``charge`` for completion tokens once they are known.

Per replica (in memory). Sharing buckets across replicas through the state store is not built
yet: with N replicas the effective limit is up to N times the configured one.
"""
