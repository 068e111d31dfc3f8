"""Drives the pure engine in real time on an asyncio loop and fans its events out."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

from loadtests.emulator.config import EngineParams
from loadtests.emulator.engine import Engine, EngineCounters, Event, EventKind, SequenceRequest


@dataclass(slots=True)
class LiveStats:
    """Counters of one emulated backend; ``running``/``waiting`` are read from the engine."""

    driver: RealtimeEngine
    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    errors: int = 0

    @property
    def running(self) -> int:
        return self.driver.counters().running

    @property
    def waiting(self) -> int:
        return self.driver.counters().waiting

    def as_dict(self) -> dict[str, int]:
        counters = self.driver.counters()
        return {
            "requests": self.requests,
            "completed": self.completed,
            "cancelled": self.cancelled,
            "errors": self.errors,
            "running": counters.running,
            "waiting": counters.waiting,
        }

    def reset(self) -> None:
        self.requests = self.completed = self.cancelled = self.errors = 0


class RealtimeEngine:
    """One timer per backend: it fires at the engine's next event time (or at once on submit),
    advances the engine to the loop's clock, and puts each event on its request's queue."""

    def __init__(self, params: EngineParams) -> None:
        self._loop = asyncio.get_running_loop()
        self._engine = Engine(params, self._loop.time())
        self._queues: dict[int, asyncio.Queue[Event]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._last = self._loop.time()

    def now(self) -> float:
        # Timers may fire a hair early; never let the engine's clock run backwards.
        self._last = max(self._last, self._loop.time())
        return self._last

    def submit(
        self, request: SequenceRequest, queue: asyncio.Queue[Event] | None = None
    ) -> asyncio.Queue[Event]:
        """Put ``request`` in the engine; its events go to ``queue`` (a new one by default;
        a request's choices share one)."""
        if queue is None:
            queue = asyncio.Queue()
        self._queues[request.seq_id] = queue
        self._engine.submit(request, self.now())
        self._pump()
        return queue

    def cancel(self, seq_id: int) -> bool:
        self._queues.pop(seq_id, None)
        removed = self._engine.cancel(seq_id, self.now())
        self._pump()
        return removed

    def counters(self) -> EngineCounters:
        return self._engine.counters(self.now())

    def last_step_end(self) -> float | None:
        """When the engine's latest finished step ended, on the loop's clock (None: none yet)."""
        end = self._engine.last_step_end
        return None if end == -math.inf else end

    def reset(self) -> None:
        self._engine.reset(self.now())
        for queue in {id(q): q for q in self._queues.values()}.values():  # once a request
            queue.put_nowait(Event(EventKind.FAILED, -1, self._last, 0))
        self._queues.clear()
        self._pump()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _pump(self, target: float | None = None) -> None:
        now = self.now() if target is None else max(self.now(), target)
        self._last = now
        for event in self._engine.advance(now):
            queue = self._queues.get(event.seq_id)
            if queue is None:
                continue
            queue.put_nowait(event)
            if event.kind in (EventKind.FINISHED, EventKind.FAILED):
                del self._queues[event.seq_id]
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        wake_at = self._engine.next_event_time()
        if wake_at is not None:
            self._timer = self._loop.call_at(wake_at, self._pump, wake_at)
