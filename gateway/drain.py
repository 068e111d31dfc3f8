"""Graceful drain: what SIGTERM does before the process exits.

In order: readiness fails (``/readyz`` answers 503, the gRPC health service NOT_SERVING) so load
balancers stop sending; after ``readiness_grace_s`` new requests are refused with 503 and a
``Retry-After``; requests already running go on until they finish or ``deadline_s`` passes.
At the deadline, streams still running end with an error event (``gateway_draining``) and
requests still waiting for a first token get a 503 — nothing is cut off silently.

:class:`DrainState` is the relay's book of what is running: per request, one entry while it
waits for its first token (its deadline timer, which the drain can fire early) and one while
its response is relayed (its :class:`OpenedStream`, which the drain can abort).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from gateway.config import DrainConfig
from gateway.errors import ApiError
from gateway.observability.events import gateway_event
from gateway.opened_stream import OpenedStream

log = logging.getLogger("meridian.drain")

_FINAL_WRITE_GRACE_S = 2.0


def draining_error() -> ApiError:
    return ApiError(
        503,
        "this gateway is shutting down; retry on another replica",
        "service_unavailable",
        "gateway_draining",
        None,
        1.0,
    )


@dataclass(slots=True)
class DrainState:
    not_ready: bool = False  # readiness fails
    refusing: bool = False  # new requests get 503
    expired: bool = False  # the deadline passed: what still runs is ended
    _opening: set[asyncio.Timeout] = field(default_factory=set)
    _streams: dict[int, OpenedStream] = field(default_factory=dict)
    _idle: asyncio.Event | None = None

    @property
    def in_flight(self) -> int:
        return len(self._opening) + len(self._streams)

    def opening(self, timer: asyncio.Timeout) -> None:
        self._opening.add(timer)

    def opened(self, timer: asyncio.Timeout, stream: OpenedStream | None) -> None:
        """The request left the first-token phase: with its stream, or failed (None)."""
        self._opening.discard(timer)
        if stream is not None:
            self._streams[id(stream)] = stream
        self._check_idle()

    def finished(self, stream: OpenedStream) -> None:
        self._streams.pop(id(stream), None)
        self._check_idle()

    def _check_idle(self) -> None:
        if self._idle is not None and not self.in_flight:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        if not self.in_flight:
            return True
        self._idle = asyncio.Event()
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
            return True
        except TimeoutError:
            return False

    def end_everything(self) -> int:
        """The deadline: fail requests still opening, abort streams still running."""
        self.expired = True
        now = asyncio.get_running_loop().time()
        for timer in list(self._opening):
            timer.reschedule(now)
        for stream in list(self._streams.values()):
            stream.exchange.abort("gateway_draining", "the gateway is shutting down; stream ended")
        return self.in_flight


async def drain(state: DrainState, config: DrainConfig) -> bool:
    """Run the drain; True when everything finished before the deadline."""
    state.not_ready = True
    gateway_event(
        "drain_started",
        f"draining: readiness failing, {state.in_flight} request(s) in flight",
        in_flight=state.in_flight,
    )
    if config.readiness_grace_s:
        await asyncio.sleep(config.readiness_grace_s)
    state.refusing = True
    log.info("draining: refusing new requests")
    if await state.wait_idle(config.deadline_s):
        gateway_event("drain_finished", "drained: every request finished", ended_early=0)
        return True
    left = state.end_everything()
    gateway_event(
        "drain_deadline_passed",
        f"drain deadline passed: ending {left} request(s) with an error",
        logging.WARNING,
        ended_early=left,
    )
    await state.wait_idle(_FINAL_WRITE_GRACE_S)
    return False
