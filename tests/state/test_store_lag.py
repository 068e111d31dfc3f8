"""A worker's call to the host's state coordinator that was answered in time, while the
worker's own event loop was too busy to read the answer, succeeds: it is no coordinator failure
(gateway/lag_timeout.py). Under a burst a worker's loop runs turns longer than a call's timeout
(0.25 s by default); each call straddling one failed, three in a row opened the breaker, and the
workers of the host routed apart, each on its own state, while the burst lasted.

The coordinator runs on a thread of its own (a process of its own in ``meridian serve
--workers N``), so it answers while the worker's loop is held, and the worker runs on uvloop as
the gateway does."""

from __future__ import annotations

import array
import asyncio
import fcntl
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvloop

from gateway.state.host_server import HostStateServer
from gateway.state.host_store import HostStore
from tests.held_loop import hold_until
from tests.servers import hang_bound

OP_S = 0.2  # the call's timeout
HELD_PAST_S = 0.5  # the loop is held this long past it: over LATE_S late, surely


@contextmanager
def coordinator_thread(path: str) -> Iterator[None]:
    """A ``HostStateServer`` on ``path``, on its own thread and event loop."""
    loop = asyncio.new_event_loop()
    server = HostStateServer(path)
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, name="coordinator")
    thread.start()
    try:
        yield
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(hang_bound(10.0))
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def _unread_bytes(store: HostStore) -> int:
    """Bytes of the coordinator's answers in the kernel that the worker has not read yet."""
    assert store._conn is not None  # the call connection (private: nothing else shows this)
    fileno = store._conn[1].get_extra_info("socket").fileno()  # uvloop's: not a socket.socket
    waiting = array.array("i", [0])
    fcntl.ioctl(fileno, termios.FIONREAD, waiting)
    return int(waiting[0])


def _hold_while_answered(store: HostStore, until: float) -> None:
    """Hold the loop (this runs on its thread) while the coordinator's answer comes and waits
    in the kernel, unread, until ``until`` (``time.monotonic()``), past the call's timeout."""
    bound = time.monotonic() + hang_bound(10.0)
    while not _unread_bytes(store):
        assert time.monotonic() < bound, "the call's line never reached the coordinator"
        hold_until(time.monotonic() + 0.001)
    hold_until(until)


async def _lease_while_held(path: str) -> bool:
    store = HostStore(path, OP_S)
    try:
        await store.ping()  # connected: the next call only writes and waits
        armed = time.monotonic()
        call = asyncio.ensure_future(store.try_lease("probe:b1", "w1", 30.0))
        await asyncio.sleep(0)  # the call has sent its line, and its timeout runs
        _hold_while_answered(store, until=armed + OP_S + HELD_PAST_S)
        return await call
    finally:
        await store.close()


def test_a_call_answered_while_the_workers_loop_was_busy_succeeds(tmp_path: Path) -> None:
    path = str(tmp_path / "state.sock")
    with coordinator_thread(path), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(_lease_while_held(path)) is True  # not StateUnavailable (a timeout)
