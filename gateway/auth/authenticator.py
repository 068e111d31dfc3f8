"""From an ``Authorization`` header to a :class:`Principal`, or a 401/403 in OpenAI's shape.

Runs on every request, so it never awaits: the key ring is a dict swapped whole by its
refresher (:mod:`gateway.auth.redis_keys`), read here without a lock.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Iterable

from gateway.auth.config import AuthConfig
from gateway.auth.keys import Principal, StoredKey, digest, key_id_of
from gateway.errors import ApiError
from gateway.inbound import tenant_from

_INFERENCE = frozenset({"inference"})


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message, "invalid_request_error", "invalid_api_key")


def forbidden(message: str, code: str) -> ApiError:
    return ApiError(403, message, "permission_error", code)


class KeyRing:
    """The keys known now: the config file's, plus Redis's (which may also revoke them)."""

    def __init__(self, config_keys: Iterable[StoredKey] = ()) -> None:
        self._config = {key.id: key for key in config_keys}
        self._keys = dict(self._config)
        self.generation = 0  # bumped on every refresh: tests and metrics synchronise on it

    def get(self, key_id: str) -> StoredKey | None:
        return self._keys.get(key_id)

    def replace_shared(self, shared: Iterable[StoredKey], revoked: Iterable[str]) -> None:
        keys = dict(self._config)
        keys.update({key.id: key for key in shared})
        for key_id in revoked:
            keys.pop(key_id, None)
        self._keys = keys  # one assignment: readers see the old ring or the new one
        self.generation += 1

    def __len__(self) -> int:
        return len(self._keys)


class Authenticator:
    def __init__(
        self,
        config: AuthConfig,
        ring: KeyRing,
        enabled: bool,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.ring = ring
        self.enabled = enabled
        self._hop_digests = tuple(config.hop_keys)
        self._wall = wall

    def authenticate(self, authorization: str | None, tenant_header: str | None) -> Principal:
        """The caller, or :class:`ApiError` 401. Never awaits."""
        if not self.enabled:
            return Principal(tenant_from(tenant_header), None, _INFERENCE, frozenset(), "off")
        if self.config.trusted_listener:
            return Principal(tenant_from(tenant_header), None, _INFERENCE, frozenset(), "trusted")
        if not authorization:
            raise unauthorized(
                "You didn't provide an API key: send it as 'Authorization: Bearer <key>'."
            )
        scheme, _, key = authorization.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise unauthorized("The Authorization header must be 'Bearer <key>'.")
        key_id = key_id_of(key)
        if key_id is None:
            return self._hop(key, tenant_header)
        stored = self.ring.get(key_id)
        if stored is None or not hmac.compare_digest(stored.sha256, digest(key)):
            raise unauthorized("Incorrect API key provided.")
        if stored.expires_at is not None and self._wall() >= stored.expires_at:
            raise unauthorized("The API key has expired.")
        return stored.principal()

    def certificate_hop(self, tenant_header: str | None) -> Principal:
        """An upstream Meridian gateway known by its client certificate (gateway/auth/tls.py)."""
        if not self.enabled:
            return Principal(tenant_from(tenant_header), None, _INFERENCE, frozenset(), "off")
        return Principal(tenant_from(tenant_header), None, _INFERENCE, frozenset(), "hop")

    def _hop(self, key: str, tenant_header: str | None) -> Principal:
        """An upstream Meridian gateway: its secret is a hop key; the tenant travels with it."""
        if self._hop_digests:
            found = digest(key)
            for expected in self._hop_digests:
                if hmac.compare_digest(expected, found):
                    return Principal(
                        tenant_from(tenant_header), None, _INFERENCE, frozenset(), "hop"
                    )
        raise unauthorized("Incorrect API key provided.")


def authorize(principal: Principal, model: str) -> None:
    """403 unless the principal may use ``model`` for inference."""
    if "inference" not in principal.scopes:
        raise forbidden("This API key may not make inference requests.", "insufficient_scope")
    if not principal.may_use(model):
        raise forbidden(f"This API key may not use the model '{model}'.", "model_not_allowed")


def has_admin(principal: Principal | None) -> bool:
    return principal is not None and "admin" in principal.scopes


__all__ = ["Authenticator", "KeyRing", "authorize", "has_admin", "unauthorized"]
