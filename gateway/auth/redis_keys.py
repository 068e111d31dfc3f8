"""API keys kept in Redis: added and revoked without a restart, seen by every replica.

Layout (under the deployment's ``state.key_prefix``): hash ``<prefix>:auth:keys`` maps a key id
to its record (JSON: sha256, tenant, models, scopes, expires_at), set ``<prefix>:auth:revoked``
holds revoked ids (which also revokes a key from the config file). The key itself is never
written anywhere. :class:`KeyRefresher` re-reads both every ``auth.refresh_s`` in the
background and swaps the ring whole; a Redis outage keeps the last ring (and says so in the log
and in ``meridian_auth_key_refresh_failures_total``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import ValidationError

from gateway.auth.authenticator import KeyRing
from gateway.auth.config import KeyEntry
from gateway.auth.keys import StoredKey

log = logging.getLogger("meridian.auth")


# redis.asyncio.Redis or RedisCluster; typed loosely (their stubs disagree on return types).
RedisLike = Any


def keys_hash(prefix: str) -> str:
    return f"{prefix}:auth:keys"


def revoked_set(prefix: str) -> str:
    return f"{prefix}:auth:revoked"


def record_of(entry: KeyEntry) -> bytes:
    return orjson.dumps(entry.model_dump(mode="json"))


def entry_of(key_id: str, raw: bytes | str) -> KeyEntry | None:
    try:
        data = orjson.loads(raw)
        data["id"] = key_id
        return KeyEntry.model_validate(data)
    except (orjson.JSONDecodeError, TypeError, ValidationError):
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def read_shared(client: RedisLike, prefix: str) -> tuple[list[StoredKey], set[str]]:
    raw = await client.hgetall(keys_hash(prefix))
    revoked = {_text(v) for v in await client.smembers(revoked_set(prefix))}
    keys: list[StoredKey] = []
    for key_id, record in (raw or {}).items():
        entry = entry_of(_text(key_id), record)
        if entry is None:
            log.warning("ignoring malformed key record id=%s", _text(key_id)[:16])
            continue
        keys.append(StoredKey.from_entry(entry))
    return keys, revoked


class KeyRefresher:
    def __init__(
        self,
        client: RedisLike,
        prefix: str,
        ring: KeyRing,
        interval_s: float,
        registry: CollectorRegistry,
    ) -> None:
        self._client, self._prefix, self._ring = client, prefix, ring
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self.failures = Counter(
            "meridian_auth_key_refresh_failures",
            "Background reads of the shared API keys that failed (the last keys stay in use)",
            registry=registry,
        )
        self.keys = Gauge("meridian_auth_keys", "API keys known to this replica", registry=registry)
        self._failing = False

    async def refresh_once(self) -> bool:
        try:
            shared, revoked = await read_shared(self._client, self._prefix)
        except Exception as exc:  # Redis away or answering garbage: keep the last ring
            self.failures.inc()
            if not self._failing:
                log.warning(
                    "cannot read shared API keys (%s); keeping the last ones", type(exc).__name__
                )
            self._failing = True
            return False
        if self._failing:
            log.info("shared API keys readable again")
        self._failing = False
        self._ring.replace_shared(shared, revoked)
        self.keys.set(len(self._ring))
        return True

    async def _run(self) -> None:
        while True:
            await self.refresh_once()
            await asyncio.sleep(self._interval_s)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
