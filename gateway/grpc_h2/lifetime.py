"""A connection's age and idleness (gRPC's A9 server-side connection management), for the h2
engine; grpc.aio takes the same bounds as its ``grpc.max_connection_*`` options.

Why: a gRPC client keeps one HTTP/2 connection and sends every call on it, so the process that
accepted it (one worker of ``meridian serve --workers N``, one replica behind a load balancer)
gets all of that client's calls for as long as the connection lives. A connection that is
closed gracefully every ``max_age_s`` (jittered +-10%, so clients connected together do not
reconnect together) is opened again by the client, and the kernel or the balancer places the new
one afresh: load spreads over workers and replicas, a new replica gets clients, an old one sheds
them.

Closing without losing a call (RFC 9113 6.8's graceful shutdown, as grpc-core does it):
1. GOAWAY with the largest stream id and a PING: the client stops opening streams here;
2. the PING's ACK proves every stream it opened before reading that GOAWAY has arrived, so a
   second GOAWAY names the last stream taken; streams after it are refused (REFUSED_STREAM,
   which a client retries elsewhere, as nothing of them ran);
3. the calls in flight finish (at most ``age_grace_s`` more, then they end UNAVAILABLE), and
   the connection closes.

h2's own ``close_connection`` moves its state machine to CLOSED, after which it sends nothing
more on any stream; so these GOAWAYs are written past it, and the refusals are this engine's.
"""

from __future__ import annotations

import asyncio
import random
from typing import Protocol

from hyperframe.frame import GoAwayFrame

from gateway.grpc_h2.limits import LifetimeLimits

DRAIN_PING = b"goaway\x00\x00"  # the opaque data of step 1's PING (8 bytes, as HTTP/2 asks)
# A client that does not answer step 1's PING within this gets step 2 anyway (every wait on a
# client is bounded).
DRAIN_PING_TIMEOUT_S = 20.0
_ANY_STREAM = 2**31 - 1


def goaway(last_stream_id: int) -> bytes:
    """A GOAWAY frame with NO_ERROR: nothing went wrong, the client may reconnect at once."""
    return GoAwayFrame(0, last_stream_id=last_stream_id, error_code=0).serialize()


class Drainable(Protocol):
    """What :class:`Lifetime` needs of its connection (``GrpcConnection``)."""

    def open_calls(self) -> int: ...

    def last_stream_id(self) -> int:
        """The highest stream id the client opened."""
        ...

    def send_frame(self, frame: bytes) -> None:
        """Write ``frame`` after everything h2 has queued."""
        ...

    def send_ping(self, data: bytes) -> None: ...

    def end_calls(self) -> None:
        """Cancel the open calls (each ends UNAVAILABLE)."""
        ...

    def finish(self, reason: str) -> None:
        """Write what h2 has queued, then close (``reason``: max_age or max_idle)."""
        ...


class Lifetime:
    """The timers and the two-step GOAWAY of one connection. The connection calls
    :meth:`started` when its handshake is done, :meth:`idle` when its last call ends,
    :meth:`busy` when a call starts on an idle connection, :meth:`ping_acked` on every PING ACK
    and :meth:`stop` when it is lost. (Idleness counts from the handshake: a client whose first
    call comes with its preface is never idle.)"""

    def __init__(
        self, limits: LifetimeLimits, connection: Drainable, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.limits = limits
        self.connection = connection
        self.loop = loop
        self.announced = False  # step 1 sent: the client was told to go
        self.reason = ""  # why: max_age or max_idle
        self.finished = False  # drained and closed
        self.last_stream_id: int | None = None  # step 2 sent: streams after this are refused
        self._age: asyncio.TimerHandle | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._ack_wait: asyncio.TimerHandle | None = None

    def started(self, idle: bool) -> None:
        """The handshake is done (the client's SETTINGS are in): the age counts from here, as
        does idleness when no call came with the preface. (A GOAWAY before it confuses clients:
        grpcio's aborts its process on one that follows the server's SETTINGS at once.)"""
        limits = self.limits
        if limits.max_age_s is not None:
            self._age = self.loop.call_later(
                limits.max_age_s * random.uniform(0.9, 1.1), self.drain, "max_age"
            )
        if idle:
            self.idle()

    def refuses(self, stream_id: int) -> bool:
        return self.last_stream_id is not None and stream_id > self.last_stream_id

    def busy(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def idle(self) -> None:
        """No call is open (any more)."""
        if self.finished:
            return
        if self.last_stream_id is not None:
            # Drained. The last call's trailers are queued in h2 when this runs (its end is
            # counted before they are sent): close once they are.
            self.loop.call_soon(self._finish_if_drained)
        elif self.limits.max_idle_s is not None and self._idle is None and not self.announced:
            self._idle = self.loop.call_later(self.limits.max_idle_s, self._idle_too_long)

    def _idle_too_long(self) -> None:
        self._idle = None
        if not self.connection.open_calls():
            self.drain("max_idle")

    def drain(self, reason: str) -> None:
        """Step 1: tell the client to go, and PING to learn when it has heard."""
        self._age = None
        if self.announced or self.finished:
            return
        self.announced = True
        self.reason = reason
        self.busy()
        self.connection.send_frame(goaway(_ANY_STREAM))
        self.connection.send_ping(DRAIN_PING)
        self._ack_wait = self.loop.call_later(DRAIN_PING_TIMEOUT_S, self.ping_acked, DRAIN_PING)

    def ping_acked(self, data: bytes) -> bool:
        """Step 2 on step 1's ACK (True: it was ours)."""
        if data != DRAIN_PING or not self.announced or self.last_stream_id is not None:
            return False
        self.last_stream_id = self.connection.last_stream_id()
        self.connection.send_frame(goaway(self.last_stream_id))
        if self._ack_wait is not None:
            self._ack_wait.cancel()
            self._ack_wait = None
        if self.limits.age_grace_s is not None:
            self._grace = self.loop.call_later(self.limits.age_grace_s, self._grace_over)
        self.loop.call_soon(self._finish_if_drained)
        return True

    def _grace_over(self) -> None:
        self._grace = None
        self.connection.end_calls()  # the last call's end closes the connection

    def _finish_if_drained(self) -> None:
        # Scheduled by step 2 and by the last call's end: both may be pending at once.
        if not self.finished and not self.connection.open_calls():
            self.finished = True
            self.connection.finish(self.reason)

    def stop(self) -> None:
        """The connection is gone: no timer fires, and a pending close neither runs nor counts."""
        self.finished = True
        for timer in (self._age, self._idle, self._grace, self._ack_wait):
            if timer is not None:
                timer.cancel()
        self._age = self._idle = self._grace = self._ack_wait = None
