"""Per-request fault decisions, pure: the config and a seeded RNG in, a plan out."""

from __future__ import annotations

import random
from dataclasses import dataclass

from loadtests.emulator.config import FaultConfig


@dataclass(frozen=True, slots=True)
class Rejection:
    status: int  # 500, 429 or 503
    retry_after_s: float | None
    message: str


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """What goes wrong with one request. ``rejection`` set means it never reaches the engine."""

    rejection: Rejection | None = None
    stall_s: float = 0.0
    drip_s: float = 0.0
    die_after_tokens: int | None = None


NO_FAULTS = FaultPlan()
NO_FAULT_CONFIG = FaultConfig.model_validate({})


def plan_request(faults: FaultConfig, rng: random.Random) -> FaultPlan:
    """Draw one request's faults. Draws happen in a fixed order so a seed replays exactly."""
    if faults == NO_FAULT_CONFIG:
        return NO_FAULTS
    roll = rng.random()
    rejection: Rejection | None = None
    if roll < faults.error_rate:
        rejection = Rejection(500, None, "emulated internal error")
    elif roll < faults.error_rate + faults.rate_limit_rate:
        rejection = Rejection(429, faults.retry_after_s, "emulated rate limit")
    elif roll < faults.error_rate + faults.rate_limit_rate + faults.unavailable_rate:
        rejection = Rejection(503, faults.retry_after_s, "emulated overload")
    stalled = faults.stall_ms > 0 and rng.random() < faults.stall_rate
    dies = faults.die_after_tokens is not None and rng.random() < faults.die_rate
    return FaultPlan(
        rejection=rejection,
        stall_s=faults.stall_ms / 1000.0 if stalled else 0.0,
        drip_s=faults.drip_ms / 1000.0,
        die_after_tokens=faults.die_after_tokens if dies else None,
    )
