"""A small health value for ``/readyz`` details and metrics."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

from gateway.state.breaker import BreakerState


class HealthStatus(StrEnum):
    OK = "ok"  # shared state is in sync (or the backend is the in-memory store)
    DEGRADED = "degraded"  # store unreachable/slow: serving on local state, writes queued


@dataclass(frozen=True, slots=True)
class StateHealth:
    status: HealthStatus
    backend: str  # memory | redis | redis-cluster
    replica: str
    breaker: BreakerState
    last_ok_age_s: float | None  # since the last successful store call; None = never
    pending_blocks: int  # prefix writes waiting for the store
    leases_held: tuple[str, ...]
    events_live: bool  # subscribed to other replicas' announcements right now
    last_error: str | None
    degraded_spells: int = 0  # state_degraded events so far: spells a scrape may fall between

    @property
    def degraded(self) -> bool:
        return self.status is HealthStatus.DEGRADED

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["status"] = str(self.status)
        out["breaker"] = str(self.breaker)
        out["leases_held"] = list(self.leases_held)
        return out
