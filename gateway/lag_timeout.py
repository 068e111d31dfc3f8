"""A timeout that tells the gateway's own lag from a backend's (or a client's) silence.

Under a burst one turn of the event loop can run for seconds (thousands of new requests parsed
and routed one after another). After it the loop polls the sockets, then runs the timers that
came due meanwhile, and a task woken by what the poll read resumes only in the turn after. So a
timeout whose timer came due in the long turn cancels its task although the answer is in (or is
still unread in the kernel): the task waited in time, the loop did not look. (A plain timer
callback, with no task waiting, sees the poll's reads first: tests/security/test_door_lag.py.)
For a probe or a metrics scrape, that read as "backend b1 failing: timeout" (seen in
``python -m loadtests.bench_streams --streams 5000``), and three in a row would mark a healthy
backend unhealthy.

:func:`judged_timeout` is ``asyncio.timeout`` that, when it fires, looks at how late its timer
ran. Later than :data:`LATE_S` means the loop was busy past the deadline, and the timeout says
nothing about the backend: it raises :class:`LoopLagged` (a ``TimeoutError``), which callers
record as no verdict rather than as the backend's failure. A timer run on time (the loop was
free to see an answer and none came) is a plain ``TimeoutError``, the backend's.

A relayed request's wait for its first token cannot give up with "no verdict": the client is
waiting. :class:`LagForgivingTimeout` bounds it instead: when its timer runs over ``LATE_S``
late, the time the loop owed is given back (the deadline moves on by as much, in all at most
the timeout again or ``FORGIVEN_MIN_S``, whichever is more), so the loop gets to read what came
meanwhile; a timer run on time ends the wait as ``asyncio.timeout`` would. The same bounds the
waits on a client (the door's body read, the SSE writer's wait for a slow reader; and, as
:class:`ForgivingTimer`, a gRPC call's waits) and on the host's state coordinator. The TCP
connect of a relayed request has its own, stricter check (gateway/tcp_connect.py): there the
kernel is asked whether the handshake completed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from types import TracebackType

# A timer this late was held up by the loop's own work: a free loop runs timers within a
# millisecond or two (libuv keeps time in whole milliseconds).
LATE_S = 0.1

# Lag a LagForgivingTimeout gives back in all, at least: the longest turn measured, in a burst of
# 8,000 new streams (``python -m loadtests.bench_streams --streams 8000``), was 7.8 s.
FORGIVEN_MIN_S = 10.0

# For the timeouts' descriptions in the configuration reference.
NOT_THE_BACKENDS = (
    "A deadline that passes while the gateway's own event loop is too busy to look (its timer "
    f"runs over {LATE_S * 1000:.0f} ms late) is no verdict on the backend, not a failure."
)

GIVEN_BACK = (
    "Time the gateway's own event loop was too busy to look (its check ran over "
    f"{LATE_S * 1000:.0f} ms late) does not count: it is given back, up to this timeout again or "
    f"{FORGIVEN_MIN_S:.0f} s, whichever is more."
)


class LoopLagged(TimeoutError):
    """The deadline passed while the event loop was too busy to look: no verdict."""

    def __init__(self, late_s: float) -> None:
        super().__init__(f"the gateway's event loop ran the timeout {late_s * 1000.0:.0f} ms late")
        self.late_s = late_s


@contextlib.asynccontextmanager
async def judged_timeout(timeout_s: float) -> AsyncIterator[None]:
    """``async with judged_timeout(2.0):`` bounds the block like ``asyncio.timeout(2.0)``; on
    expiry it raises :class:`LoopLagged` if the timer ran late, else ``TimeoutError``."""
    loop = asyncio.get_running_loop()
    timeout = asyncio.timeout(timeout_s)
    try:
        async with timeout:
            yield
    except TimeoutError as exc:
        if not timeout.expired():  # the block's own TimeoutError, not this deadline
            raise
        when = timeout.when()
        # The turn that ran the timer began at loop.time() (libuv's cached clock, the same in
        # the timer and here, where the cancelled task resumes in that turn).
        late_s = 0.0 if when is None else loop.time() - when
        if late_s > LATE_S:
            raise LoopLagged(late_s) from exc
        raise


def forgiveness_bound_s(timeout_s: float) -> float:
    """The most lag a timeout of ``timeout_s`` gives back in all."""
    return max(timeout_s, FORGIVEN_MIN_S)


def gives_back(late_s: float, forgiven_s: float, bound_s: float) -> bool:
    """Whether a check that ran ``late_s`` late gives the loop its lag back, ``forgiven_s`` of
    ``bound_s`` given already: late enough to be the loop's doing, and within the bound."""
    return late_s > LATE_S and forgiven_s + late_s <= bound_s


class ForgivingTimer:
    """``loop.call_later(timeout_s, on_expiry)`` for a deadline on a wait that must not blame
    anyone for the event loop's own lag: when the timer runs over ``LATE_S`` late, the deadline
    moves on by its lateness instead (in all at most ``forgivable_s``; by default ``timeout_s``
    or ``FORGIVEN_MIN_S``, whichever is more), so the task woken by what the loop read
    meanwhile resumes first and cancels it. A timer run on time calls ``on_expiry``. Cancelled
    like a ``TimerHandle``."""

    __slots__ = ("_due", "_forgivable", "_forgiven", "_handle", "_loop", "_on_expiry")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        timeout_s: float,
        on_expiry: Callable[[], object],
        forgivable_s: float | None = None,
    ) -> None:
        self._on_expiry = on_expiry
        self._forgiven = 0.0
        self._forgivable = forgiveness_bound_s(timeout_s) if forgivable_s is None else forgivable_s
        self._start(loop, timeout_s)

    def _start(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._loop = loop
        self._due = due = loop.time() + timeout_s
        self._handle = loop.call_at(due, self._check)

    def cancel(self) -> None:
        self._handle.cancel()

    @property
    def forgiven_s(self) -> float:
        """The time given back to the loop so far."""
        return self._forgiven

    def _check(self) -> None:
        loop = self._loop
        now = loop.time()  # libuv's clock of the turn that runs this timer
        late = now - self._due
        if gives_back(late, self._forgiven, self._forgivable):
            self._forgiven += late
            self._due = now + late
            self._handle = loop.call_at(self._due, self._check)
            return
        self._expire()

    def _expire(self) -> None:
        self._on_expiry()


class LagForgivingTimeout(ForgivingTimer):
    """``async with LagForgivingTimeout(60.0):`` bounds the block like ``asyncio.timeout(60.0)``
    (``TimeoutError`` on expiry), except for the time the event loop was too busy to look
    (:class:`ForgivingTimer`; one object: it is on every attempt's wait for a first token)."""

    __slots__ = ("_timeout", "_timeout_s")

    def __init__(self, timeout_s: float, forgivable_s: float | None = None) -> None:
        self._timeout_s = timeout_s
        self._forgiven = 0.0
        self._forgivable = forgiveness_bound_s(timeout_s) if forgivable_s is None else forgivable_s

    async def __aenter__(self) -> LagForgivingTimeout:
        loop = asyncio.get_running_loop()
        timeout = self._timeout = asyncio.timeout(None)
        await timeout.__aenter__()
        self._start(loop, self._timeout_s)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._handle.cancel()
        await self._timeout.__aexit__(exc_type, exc, tb)  # raises TimeoutError if it expired

    def _expire(self) -> None:
        # The task is cancelled now; TimeoutError is raised where it waits.
        self._timeout.reschedule(self._loop.time())
