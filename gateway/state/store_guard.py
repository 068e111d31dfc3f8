"""``StoreGuard``: the one way a replica's sync calls its shared store.

Every store call goes through ``call``: a circuit breaker skips calls while the store keeps
failing, the first failure after a good spell announces ``state_degraded`` (once, not once per
call), and the first success after a failing spell announces ``state_recovered`` and runs the
owner's ``on_recovered`` (re-announce the replica, re-send blocks, pull everything). The
guard tells the owner's health and leadership checks whether the store is degraded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.observability.events import gateway_event
from gateway.state.breaker import BreakerState, CircuitBreaker
from gateway.state.errors import StateError, StateErrorKind, StateUnavailable

T = TypeVar("T")


class StoreGuard:
    def __init__(
        self,
        store_kind: str,
        replica: str,
        breaker: CircuitBreaker,
        mono: Callable[[], float],
        on_recovered: Callable[[], None],
    ) -> None:
        self.breaker = breaker
        self.last_ok: float | None = None  # the monotonic time of the latest good call
        self.last_error: str | None = None
        self.failing = True  # until the first successful call
        self.spells = 0  # state_degraded events so far (each spell of serving on local state)
        self._store_kind = store_kind
        self._replica = replica
        self._mono = mono
        self._on_recovered = on_recovered
        self._said_degraded = False  # a state_degraded event is out with no recovery after it

    def degraded(self) -> bool:
        return self.failing or self.breaker.state is not BreakerState.CLOSED

    async def call(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``'s result; raises ``StateUnavailable`` when it fails or the circuit is
        open (kind ``circuit_open``: not tried at all)."""
        if not self.breaker.allow():
            raise StateUnavailable(
                StateError(
                    StateErrorKind.CIRCUIT_OPEN,
                    f"{what}: skipped, circuit open after repeated store failures",
                )
            )
        try:
            result = await call()
        except StateUnavailable as exc:
            self._failed(exc)
            raise
        except asyncio.CancelledError:
            self.breaker.record_failure()  # never leave a half-open trial unresolved
            raise
        self.breaker.record_success()
        self.last_ok = self._mono()
        if self.failing:
            self._recovered()
        return result

    def _failed(self, exc: StateUnavailable) -> None:
        self.breaker.record_failure()
        self.failing = True
        self.last_error = str(exc.error)
        if not self._said_degraded:
            self._said_degraded = True
            self.spells += 1
            gateway_event(
                "state_degraded",
                f"shared state ({self._store_kind}) unreachable: serving on local state",
                logging.WARNING,
                store=self._store_kind,
                replica=self._replica,
                error_kind=exc.error.kind.value,
            )

    def _recovered(self) -> None:
        """The store answers again (or for the first time)."""
        self.failing = False
        if self._said_degraded:
            self._said_degraded = False
            gateway_event(
                "state_recovered",
                f"shared state ({self._store_kind}) answers again",
                store=self._store_kind,
                replica=self._replica,
            )
        self._on_recovered()
