"""API keys: their format, their hash, and the principal a valid one stands for.

A key is ``mrd_<id>_<secret>``: ``id`` (8 characters) is public and indexes the key, ``secret``
(32 URL-safe characters, 192 bits) is not. Only the SHA-256 of the whole key is stored; a
high-entropy key needs no slow hash. Checking a key costs one dict lookup, one SHA-256 and one
constant-time comparison.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
from dataclasses import dataclass
from datetime import datetime

from aiohttp import web

from gateway.auth.config import KeyEntry

PREFIX = "mrd"

_ID_ALPHABET = string.ascii_lowercase + string.digits


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for, decided by the door — never by a header the client sets."""

    tenant: str
    key_id: str | None  # None: auth is off, a trusted listener, or a gateway hop
    scopes: frozenset[str]
    models: frozenset[str]  # empty: every model
    via: str  # "key" | "hop" | "trusted" | "off"

    def may_use(self, model: str) -> bool:
        return not self.models or model in self.models


@dataclass(frozen=True, slots=True)
class StoredKey:
    id: str
    sha256: str
    tenant: str
    models: frozenset[str]
    scopes: frozenset[str]
    expires_at: float | None  # epoch seconds

    @classmethod
    def from_entry(cls, entry: KeyEntry) -> StoredKey:
        return cls(
            id=entry.id,
            sha256=entry.sha256,
            tenant=entry.tenant,
            models=frozenset(entry.models),
            scopes=frozenset(entry.scopes),
            expires_at=_epoch(entry.expires_at),
        )

    def principal(self) -> Principal:
        return Principal(self.tenant, self.id, self.scopes, self.models, "key")


# Where the door keeps a request's Principal (set by gateway/auth/wiring.py's middleware).
PRINCIPAL = web.RequestKey("meridian_principal", Principal)


def _epoch(at: datetime | None) -> float | None:
    return None if at is None else at.timestamp()


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(key: str) -> str | None:
    """The id part of a well-formed key, else None (nothing is hashed for garbage)."""
    if len(key) != 45 or not key.startswith(PREFIX + "_") or key[12] != "_":
        return None
    return key[4:12]


def matches(stored: StoredKey, key: str) -> bool:
    return hmac.compare_digest(stored.sha256, digest(key))


def new_key() -> tuple[str, str]:
    """A fresh (key, key id). The key is shown once; only its digest is kept."""
    key_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))
    secret = secrets.token_urlsafe(24)  # 32 characters
    return f"{PREFIX}_{key_id}_{secret}", key_id
