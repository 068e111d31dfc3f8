"""How many extra upstream attempts (retries and hedges) the gateway may make, and when not.

:class:`RetryBudget` is a token bucket filled by client requests, not by time: each request
adds ``ratio`` tokens (up to ``burst``), each retry or hedge spends one. Over any stretch of
traffic the extra attempts are therefore at most ``ratio`` x requests + ``burst``, so a sick
fleet sees at most a fixed fraction more load than the clients send, however many backends
fail. :class:`RetryAfterTable` remembers a backend's ``Retry-After`` and keeps it out of the
candidates until then. Neither does I/O or reads a clock: time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RetryBudget:
    ratio: float
    burst: float
    tokens: float = field(init=False)
    requests: int = field(default=0, init=False)
    spent: int = field(default=0, init=False)
    denied: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def on_request(self) -> None:
        """A client request arrived: it earns ``ratio`` retry tokens."""
        self.requests += 1
        self.tokens = min(self.burst + self.ratio, self.tokens + self.ratio)

    def try_spend(self) -> bool:
        """Take one token for a retry or hedge; False (and counted) when there is none."""
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            self.spent += 1
            return True
        self.denied += 1
        return False


@dataclass(slots=True)
class RetryAfterTable:
    """Backends that asked, with ``Retry-After``, not to be sent requests until a time."""

    max_wait_s: float
    _until: dict[str, float] = field(default_factory=dict)

    def note(self, backend: str, retry_after_s: float, now: float) -> None:
        wait = min(max(0.0, retry_after_s), self.max_wait_s)
        if wait > 0:
            self._until[backend] = max(self._until.get(backend, 0.0), now + wait)

    def wait_s(self, backend: str, now: float) -> float:
        """Seconds until ``backend`` may be tried again; 0 when it may be tried now."""
        until = self._until.get(backend)
        if until is None:
            return 0.0
        if until <= now:
            del self._until[backend]
            return 0.0
        return until - now
