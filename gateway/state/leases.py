"""Which replica probes what: leases held in the store, and a cheap local answer.

Timing, for a lease period P: the stored lease lives 0.75 P and is renewed every 0.25 P;
other replicas try to take it every 0.25 P. A holder that dies stops renewing, its lease
expires at most 0.75 P after its last renewal, and the next attempt (within 0.25 P) takes it:
takeover within P. A holder that stops cleanly releases at once. The holder trusts its lease
only until 90% of its stored life has passed since the attempt began, so two replicas never
both believe they lead while the store is reachable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from gateway.state.errors import StateUnavailable

_TTL_SHARE = 0.75
_RENEW_SHARE = 0.25
_TRUST_SHARE = 0.9


class LeaseKeeper:
    def __init__(self, holder: str, period_s: float, mono: Callable[[], float]) -> None:
        self.holder = holder
        self.ttl_s = period_s * _TTL_SHARE
        self.renew_every_s = period_s * _RENEW_SHARE
        self._mono = mono
        self._wanted: set[str] = set()
        self._valid_until: dict[str, float] = {}

    def want(self, names: Iterable[str]) -> None:
        self._wanted.update(names)

    def wanted(self) -> frozenset[str]:
        return frozenset(self._wanted)

    def is_held(self, name: str) -> bool:
        return self._valid_until.get(name, float("-inf")) > self._mono()

    def held(self) -> list[str]:
        return sorted(name for name in self._wanted if self.is_held(name))

    async def renew(self, try_lease: Callable[[str], Awaitable[bool]]) -> None:
        """One round: acquire or extend every wanted lease. A failed call loses nothing at
        once; belief simply runs out at its deadline if renewals keep failing."""
        for name in sorted(self._wanted):
            started = self._mono()
            try:
                held = await try_lease(name)
            except StateUnavailable:
                continue
            if held:
                self._valid_until[name] = started + self.ttl_s * _TRUST_SHARE
            else:
                self._valid_until.pop(name, None)

    def forget(self) -> list[str]:
        held = self.held()
        self._valid_until.clear()
        return held
