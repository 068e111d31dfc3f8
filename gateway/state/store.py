"""The state-store interface: what a replica asks of the place shared state lives.

Two real implementations: ``MemoryStore`` (one process, zero setup; also lets several
``SharedStateSync`` instances in one process share state) and ``RedisStore`` (standalone or
Redis Cluster). Every method is a coroutine that may raise ``StateUnavailable``; none of them is
ever awaited on the request path (``SharedStateSync`` calls them from background tasks).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from gateway.state.records import SharedPull, TokenResult, WriteBatch


@dataclass(frozen=True, slots=True)
class StoreSummary:
    """What ``meridian state inspect`` prints: counts and sizes, never contents."""

    backend: str
    key_counts: dict[str, int] = field(default_factory=dict)  # kind -> keys
    memory_bytes: dict[str, int] = field(default_factory=dict)  # kind -> bytes (estimated)
    leases: dict[str, str] = field(default_factory=dict)  # lease name -> holder
    in_flight: dict[str, int] = field(default_factory=dict)  # backend -> total over replicas
    replicas: tuple[str, ...] = ()
    prefix_blocks: dict[str, int] = field(default_factory=dict)  # backend -> blocks indexed
    server: dict[str, str] = field(default_factory=dict)  # version, used_memory, ...


class StateStore(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def events_lossless(self) -> bool:
        """True when ``events()`` delivers every batch pushed while it is subscribed or else
        ends (so a reader that stayed subscribed needs no delta pull of prefix blocks). Redis
        pub/sub is not: its client may reconnect a subscription silently."""

    async def ping(self) -> None: ...

    async def push(self, batch: WriteBatch) -> None:
        """Apply one replica's batched writes (with bounds and TTLs) and announce them to the
        other replicas."""

    async def pull(self, since: float, now: float) -> SharedPull:
        """Everything live now; prefix blocks only if seen at or after ``since`` (wall s)."""

    def events(self) -> AsyncIterator[WriteBatch | None]:
        """Batches pushed by any replica (including this one), as they are announced, and
        ``None`` once subscribed and then whenever idle (a liveness tick). Ends (by raising
        ``StateUnavailable``, or by returning when a slow reader fell behind) when the
        subscription breaks; call again to resubscribe."""

    async def forget_replica(self, replica: str) -> None:
        """Drop a replica's in-flight counts now (clean shutdown)."""

    async def try_lease(self, name: str, holder: str, ttl_s: float) -> bool:
        """Acquire the lease, or extend it if ``holder`` already has it. True if held."""

    async def release_lease(self, name: str, holder: str) -> bool: ...

    async def take_tokens(
        self, bucket: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenResult:
        """Atomically refill ``bucket`` and take ``cost`` tokens if there are enough."""

    async def summary(self) -> StoreSummary: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Retention:
    """How long and how much the store keeps (see README.md, "Bounds")."""

    prefix_ttl_s: float = 600.0
    prefix_blocks_per_backend: int = 50_000
    signal_ttl_s: float = 60.0
    ejection_ttl_s: float = 3600.0
    in_flight_ttl_s: float = 10.0
