"""A token bucket: ``rate`` tokens a second up to ``burst``; time is passed in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Bucket:
    rate: float  # tokens per second
    burst: float
    tokens: float
    updated: float

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> Bucket:
        return cls(rate, burst, burst, now)

    def refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, cost: float, now: float) -> bool:
        self.refill(now)
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False

    def debit(self, cost: float, now: float) -> None:
        """Charge after the fact (completion tokens): may go below zero, delaying the next."""
        self.refill(now)
        self.tokens -= cost

    def missed(self, cost: float) -> None:
        """A request needing ``cost`` was refused: nothing to do, time refills it."""

    def wait_s(self, cost: float) -> float:
        """How long until ``cost`` tokens are there (after a failed take)."""
        missing = min(cost, self.burst) - self.tokens
        return max(0.0, missing / self.rate)

    def reset_s(self) -> float:
        """How long until the bucket is full again."""
        return max(0.0, (self.burst - self.tokens) / self.rate)

    def is_full(self, now: float) -> bool:
        self.refill(now)
        return self.tokens >= self.burst
