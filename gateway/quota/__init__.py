"""Quotas per API key and per tenant: requests per second and tokens per minute.

- :mod:`gateway.quota.config` — ``quotas:`` in the operator file.
- :mod:`gateway.quota.bucket` — a token bucket on an injected clock (pure).
- :mod:`gateway.quota.limiter` — the buckets of every key and tenant, bounded and expiring;
  ``admit`` before any upstream call (429 with ``Retry-After`` and ``x-ratelimit-*``),
  ``charge`` for completion tokens once they are known.

- :mod:`gateway.quota.allowance` — with shared state, a bucket kept in the store and spent
  locally from an allowance (bounds and fail-open in its docstring).
- :mod:`gateway.quota.refill` — claims allowances from the store in the background.
- :mod:`gateway.quota.wiring` — which of the two a gateway uses, and the refiller's task.

Without shared state (``state.backend: memory``) every replica has its own buckets.
"""
