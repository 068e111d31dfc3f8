"""Admission control: bounded concurrency and a bounded queue per model and per tenant.

A request holds one slot in its tenant's gate and one in its model's gate from admission until
its response is over. When a gate is full the request waits in that gate's queue (first come,
first served) for at most ``queue_timeout_s``; when the queue is full too it is refused at once
— 429 when its tenant is over its share, 503 when the model is over capacity — with a
``Retry-After``, instead of queueing without bound. Requests already admitted are never touched.
With no limits configured, admission costs one attribute check and never awaits.

Gates exist only while someone holds or awaits them: the last one out drops its gate, so the
number of gates is bounded by the requests in flight, whatever tenant names clients send.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config import AdmissionConfig, GateLimits
from gateway.errors import ApiError


@dataclass(slots=True)
class Gate:
    name: str  # "model m1" or "tenant t1": for messages only
    limits: GateLimits
    in_use: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)
    on_idle: Callable[[Gate], None] | None = None  # called when the last holder leaves

    def try_enter(self) -> bool:
        if self.in_use < self.limits.max_concurrent and not self.waiters:
            self.in_use += 1
            return True
        return False

    def can_queue(self) -> bool:
        return len(self.waiters) < self.limits.max_queue

    async def wait(self, timeout_s: float) -> bool:
        """Queue for a slot; True once one was handed over, False on timeout."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(future)
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(future)
            return True
        except TimeoutError:
            return self._give_up(future)
        except asyncio.CancelledError:
            if self._give_up(future):
                self.leave()  # the slot was handed over as we were cancelled: pass it on
            raise

    def _give_up(self, future: asyncio.Future[None]) -> bool:
        """Leave the queue; True when the slot had already been handed over (keep it)."""
        if future.done():
            return True
        future.cancel()
        self.waiters.remove(future)
        return False

    def leave(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight to the next in line
                return
        self.in_use = max(0, self.in_use - 1)
        if self.in_use == 0 and self.on_idle is not None:
            self.on_idle(self)


@dataclass(slots=True)
class Ticket:
    """The slots one admitted request holds; ``release`` once its response is over."""

    gates: tuple[Gate, ...] = ()
    released: bool = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        for gate in self.gates:
            gate.leave()


class Admission:
    def __init__(self, config: AdmissionConfig) -> None:
        self.config = config
        self.enabled = bool(
            config.per_model or config.per_tenant or config.models or config.tenants
        )
        self._gates: dict[tuple[str, str], Gate] = {}
        self.refused = 0

    def _gate(self, kind: str, key: str) -> Gate | None:
        found = self._gates.get((kind, key))
        if found is not None:
            return found
        overrides = self.config.models if kind == "model" else self.config.tenants
        default = self.config.per_model if kind == "model" else self.config.per_tenant
        limits = overrides.get(key, default)
        if limits is None:
            return None
        gate = self._gates[(kind, key)] = Gate(f"{kind} {key}", limits)
        gate.on_idle = lambda idle: self._drop(kind, key, idle)
        return gate

    def _drop(self, kind: str, key: str, gate: Gate) -> None:
        if self._gates.get((kind, key)) is gate:
            del self._gates[(kind, key)]

    @property
    def gate_count(self) -> int:
        """Gates alive now: one per model or tenant with requests in flight or queued."""
        return len(self._gates)

    def held(self) -> int:
        """Slots held and places queued over every gate (0 when no request is admitted)."""
        return sum(gate.in_use + len(gate.waiters) for gate in self._gates.values())

    async def admit(self, model: str, tenant: str) -> Ticket:
        """A ticket holding the request's slots, or :class:`ApiError` 429/503 when full."""
        if not self.enabled:
            return Ticket()
        held: list[Gate] = []
        try:
            for kind, key in (("tenant", tenant), ("model", model)):
                gate = self._gate(kind, key)
                if gate is None:
                    continue
                if not gate.try_enter():
                    await self._queue(gate, kind)
                held.append(gate)
        except BaseException:
            for gate in held:
                gate.leave()
            raise
        return Ticket(tuple(held))

    async def _queue(self, gate: Gate, kind: str) -> None:
        if gate.can_queue() and await gate.wait(self.config.queue_timeout_s):
            return
        self.refused += 1
        limits = gate.limits
        message = (
            f"{gate.name} is at its limit ({limits.max_concurrent} in flight, "
            f"{limits.max_queue} queued); retry later"
        )
        retry = self.config.retry_after_s
        if kind == "tenant":
            raise ApiError(429, message, "rate_limit_error", "tenant_over_limit", None, retry)
        raise ApiError(503, message, "service_unavailable", "model_overloaded", None, retry)
