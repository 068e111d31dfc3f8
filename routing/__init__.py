"""Meridian's routing engine: a pure library (no sockets, asyncio, Redis or wall clock).

The gateway builds a :class:`RequestProfile` and a :class:`FleetSnapshot`, passes in the time,
and gets back a :class:`Decision`: the ranked candidates, each with its predicted TTFT and why.
"""

from routing.types import (
    BackendKind,
    BackendSpec,
    BackendState,
    Candidate,
    Decision,
    FleetSnapshot,
    LatencyClass,
    Observation,
    Rejection,
    RequestProfile,
    Router,
)

__all__ = [
    "BackendKind",
    "BackendSpec",
    "BackendState",
    "Candidate",
    "Decision",
    "FleetSnapshot",
    "LatencyClass",
    "Observation",
    "Rejection",
    "RequestProfile",
    "Router",
]
