"""Per-tenant prefix-cache isolation at the engine: vLLM's ``cache_salt``.

An engine's prefix cache is shared by every request it serves, so a tenant could time its own
requests to learn whether another tenant recently sent a prefix. vLLM (0.9+) keys its KV-cache
blocks by the request's ``cache_salt`` as well: requests with different salts never share
blocks. With ``auth.cache_salt_secret_env`` set, every request to a ``engine: vllm`` backend
carries ``cache_salt = HMAC-SHA256(secret, tenant)`` (hex) — replacing any salt the client
sent, so no tenant can pick another's — and tenants' cached prefixes, ``cached_tokens`` and
timings stay their own. Other engines get the body unchanged.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from gateway.config import GatewayConfig

SALTED_ENGINES = frozenset({"vllm"})


class CacheSalter:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    @classmethod
    def from_env(cls, name: str | None) -> CacheSalter | None:
        if not name:
            return None
        value = os.environ.get(name)
        if not value:
            from gateway.config import ConfigError

            raise ConfigError(f"auth.cache_salt_secret_env: environment variable {name} is not set")
        return cls(value.strip().encode())

    def salt(self, tenant: str) -> str:
        # Computed every time (~1 µs, next to parsing and re-encoding the body): a cache keyed
        # by tenant would keep every tenant ever seen (issue 19: nothing per tenant for ever).
        return hmac.new(self._secret, tenant.encode(), hashlib.sha256).hexdigest()

    def salted(self, body: bytes, tenant: str) -> bytes:
        """``body`` with its top-level ``cache_salt`` set to the tenant's."""
        payload = orjson.loads(body)
        if not isinstance(payload, dict):
            return body
        payload["cache_salt"] = self.salt(tenant)
        return orjson.dumps(payload)


class _ForConfig:
    """The salter and the salted backends of the config in use (rebuilt when a reload swaps
    the config object); ``upstream_call`` asks per attempt, so this is one identity check."""

    def __init__(self) -> None:
        self._config: object = None
        self._salter: CacheSalter | None = None
        self._backends: frozenset[str] = frozenset()

    def body(self, config: GatewayConfig, backend: str, body: bytes, tenant: str) -> bytes:
        if config is not self._config:
            self._salter = CacheSalter.from_env(config.auth.cache_salt_secret_env)
            self._backends = frozenset(
                b.name for b in config.backends if b.engine in SALTED_ENGINES
            )
            self._config = config
        if self._salter is None or backend not in self._backends:
            return body
        return self._salter.salted(body, tenant)


salt_for = _ForConfig().body
