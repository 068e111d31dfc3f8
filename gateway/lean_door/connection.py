"""One client connection of the lean door: HTTP/1.1 keep-alive, read without aiohttp.

A connection reads each request head itself (:func:`gateway.lean_door.head.parse_head`). A
plain request to a streaming endpoint runs the door's runner (:func:`gateway.doors.sse_door.run`)
in a task, with the body read here under the body timeout, and its answer written straight to
the transport (:class:`gateway.lean_door.sse.LeanSse`, or a whole response). Any other request
hands the connection to aiohttp's server for good: its handler is made, given the transport and
the bytes read so far, as if it had accepted the connection itself. So aiohttp still answers
every other route, every malformed request and every unusual one, in its own words.

What aiohttp's server did for these requests, done here: the connection caps (counted once,
carried over on a hand-over), the deadline for the first head (408 and a lingering close), the
keep-alive timeout, the body timeout (408, ``meridian_door_timeouts{phase="body"}``), the auth
gate's 401 with ``WWW-Authenticate``, a 500 in the OpenAI shape for an unexpected error, and
the handler cancelled when the client goes away (the upstream request with it). Reading pauses
while a request runs and more than :data:`_MAX_PIPELINED` bytes wait behind it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import cast

from aiohttp import web

from gateway.auth.keys import Principal
from gateway.doors.door_http import body_too_large
from gateway.doors.sse_door import run
from gateway.doors.wire import DoorWire
from gateway.errors import ApiError
from gateway.http_socket.policy import body_too_slow
from gateway.http_socket.protocol import TIMEOUT_RESPONSE, HeadTimeoutLinger, connection_ends
from gateway.inbound import Endpoint
from gateway.lag_timeout import LagForgivingTimeout
from gateway.lean_door.door import LeanDoor
from gateway.lean_door.head import HEAD_END, MAX_LEAN_HEAD, Head, parse_head
from gateway.lean_door.request import LeanRequest
from gateway.lean_door.response import closes, whole_response
from gateway.lean_door.routes import LEAN_ROUTES

log = logging.getLogger("meridian.door")

_MAX_PIPELINED = 64 * 1024
_WWW_AUTHENTICATE = {"WWW-Authenticate": 'Bearer realm="meridian"'}


def _internal_error() -> web.Response:
    return ApiError(500, "internal gateway error", "server_error", "internal_error").to_response()


class LeanConnection(asyncio.Protocol):
    def __init__(self, door: LeanDoor) -> None:
        self.door = door
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer_host: str | None = None
        self._counted_as: str | None = None
        self._buffer = bytearray()
        self._read_at = 0.0  # perf_counter() of the latest read
        self._timer: asyncio.TimerHandle | None = None  # head deadline, then keep-alive
        self._linger: HeadTimeoutLinger | None = None
        self.task: asyncio.Task[None] | None = None  # the request running now
        self._body_wanted = 0
        self._body_ready: asyncio.Future[None] | None = None
        self._body_left = 0  # of the running request's body, not yet taken from the buffer
        self._body_unread = False  # the rest of a body will not be read: close after it
        self._read_paused = False
        self._write_paused = False
        self._drained: list[asyncio.Future[None]] = []
        self._lost = False
        self._handed_over = False
        self.closing = False  # this response is the connection's last
        self.send_buffer: int | None = None  # SO_SNDBUF as an SSE response last set it

    # -- the connection ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's is not one
        client, local_port = connection_ends(transport)
        self.peer_host = None if client == "unix" else client
        policy = self.door.policy
        if local_port in policy.exempt_ports:  # the admin listener: aiohttp's, from the start
            self._hand_over("admin_listener")
            return
        if not policy.admit(client, local_port):
            self._lost = True
            transport.close()  # before a byte is read: the cheapest refusal there is
            return
        self._counted_as = client
        self.door.connections.add(self)
        self._timer = self._loop.call_later(policy.config.header_timeout_s, self._head_late)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._lost = True
        self._cancel_timer()
        if self._linger is not None:
            self._linger.timer.cancel()
        if self._counted_as is not None:
            self.door.policy.release(self._counted_as)
            self._counted_as = None
        self.door.connections.discard(self)
        if self.task is not None:
            self.task.cancel()  # the client went away: so does its upstream request
        if self._body_ready is not None and not self._body_ready.done():
            self._body_ready.set_exception(ConnectionResetError("client connection closed"))
        self._wake_writers()
        self._buffer.clear()

    def eof_received(self) -> bool | None:
        return None  # the transport closes; a running request is cancelled (as in aiohttp)

    def data_received(self, data: bytes) -> None:
        if self._linger is not None:  # answered 408: what still comes is read and dropped
            self._linger.discard(len(data))
            return
        self._read_at = read_at = time.perf_counter()
        self._buffer += data
        if self.task is None:
            self._next_request(read_at)
        elif self._body_ready is not None:
            if len(self._buffer) >= self._body_wanted and not self._body_ready.done():
                self._body_ready.set_result(None)
        elif len(self._buffer) > _MAX_PIPELINED and self.transport is not None:
            self.transport.pause_reading()
            self._read_paused = True

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers()

    def _wake_writers(self) -> None:
        waiters, self._drained = self._drained, []
        for waiter in waiters:
            if not waiter.done():
                if self._lost:
                    waiter.set_exception(ConnectionResetError("client connection closed"))
                else:
                    waiter.set_result(None)

    def live_transport(self) -> asyncio.Transport | None:
        return None if self._lost else self.transport

    @property
    def waiting_to_write(self) -> bool:
        """A stream waits for the client to take what it was sent (the write timeout runs)."""
        return bool(self._drained)

    async def drain(self) -> None:
        """Until the transport is under its low-water mark (the SSE sink's wait)."""
        if self._lost:
            raise ConnectionResetError("client connection closed")
        if not self._write_paused:
            return
        waiter = self._loop.create_future()
        self._drained.append(waiter)
        await waiter

    def close_when_idle(self) -> None:
        """Shutdown: close now if no request runs, else after its answer."""
        self.closing = True
        if self.task is None and self.transport is not None and not self._lost:
            self.transport.close()

    # -- requests ---------------------------------------------------------------------------

    def _next_request(self, read_at: float) -> None:
        buffer = self._buffer
        end = buffer.find(HEAD_END, 0, MAX_LEAN_HEAD + len(HEAD_END))
        if end < 0:
            if len(buffer) > MAX_LEAN_HEAD:
                self._hand_over("request")  # a head this long is aiohttp's to refuse
            return  # the rest of the head is still on its way (the timer bounds it)
        end += len(HEAD_END)
        head = parse_head(bytes(buffer[:end]))
        if head is None or head.content_length > self.door.relay.config.limits.max_body_bytes:
            self._hand_over("request")
            return
        route = LEAN_ROUTES.get(head.path) if head.method == "POST" else None
        if route is None:
            self._hand_over("route")
            return
        self.door.served += 1
        del buffer[:end]
        self._body_left = head.content_length
        self._cancel_timer()
        if not head.keep_alive:
            self.closing = True
        self.task = self._loop.create_task(self._serve(head, route, read_at))

    async def _serve(
        self, head: Head, route: tuple[Endpoint, DoorWire], received_at: float
    ) -> None:
        endpoint, wire = route
        request: LeanRequest | None = None
        try:
            principal = self._authenticate(head)
            if isinstance(principal, web.Response):
                response: web.StreamResponse | None = principal
            else:
                request = LeanRequest(self, head, received_at, principal)
                response = await run(request, endpoint, wire)
        except asyncio.CancelledError:
            raise  # the client went away, or the shutdown's deadline passed
        except Exception:
            log.exception("unhandled error on %s %s", head.method, head.path)
            sink = request.sink if request is not None else None
            if sink is not None and sink.started:
                self.closing = True
                response = None
            else:
                response = _internal_error()
        finally:
            self.task = None
            self._body_ready = None
        try:
            self._answered(request, response)
        except Exception:  # an answer that cannot be written (ImpossibleState): cut off
            log.exception("could not answer %s %s", head.method, head.path)
            if (transport := self.live_transport()) is not None:
                transport.abort()

    def _authenticate(self, head: Head) -> Principal | web.Response:
        """The auth gate's decision (``gateway.auth.wiring.auth_gate``): a principal or a 401."""
        authenticator = self.door.authenticator
        tenant_header = head.headers.get(authenticator.config.tenant_header)
        try:
            return authenticator.authenticate(head.headers.get("Authorization"), tenant_header)
        except ApiError as err:
            return err.to_response(_WWW_AUTHENTICATE)

    def _answered(self, request: LeanRequest | None, response: web.StreamResponse | None) -> None:
        transport = self.live_transport()
        if transport is None or transport.is_closing():
            return
        if self._body_left:  # answered without its body (a 401): it is dropped, not parsed
            if len(self._buffer) >= self._body_left:
                del self._buffer[: self._body_left]
            else:
                self._body_unread = True
            self._body_left = 0
        if isinstance(response, web.Response):
            if response.status == 499:  # the client left before the headers (never sent)
                transport.close()
                return
            last = self.closing or self._body_unread or closes(response)
            transport.write(whole_response(response, close=last))
            self.closing = last
        elif response is not None:
            log.error("the door's runner answered a lean request with an unsent response")
            self.closing = True
        else:
            sink = request.sink if request is not None else None
            if sink is None or not sink.finish():
                self.closing = True
        if self.closing:
            self._close(transport)
            return
        self._timer = self._loop.call_later(
            self.door.policy.config.keepalive_timeout_s, self._idle_too_long
        )
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()
        if self._buffer:  # a pipelined request came behind this one, by the latest read
            self._next_request(self._read_at)

    def _close(self, transport: asyncio.Transport) -> None:
        if self._body_unread:  # read and drop the rest for a while: a FIN, not a reset
            self._linger = HeadTimeoutLinger(transport, self._loop, answer=b"")
        else:
            transport.close()

    @property
    def reading_body(self) -> bool:
        """A request waits for the rest of its body (the body timeout runs)."""
        return self._body_ready is not None

    async def read_body(self, length: int) -> bytes:
        """The body's ``length`` bytes, within the door's body timeout (408)."""
        limit = self.door.relay.config.limits.max_body_bytes
        if length > limit:
            raise body_too_large(limit)
        if len(self._buffer) < length:
            if self._read_paused and self.transport is not None:  # paused behind the head
                self._read_paused = False
                self.transport.resume_reading()
            self._body_wanted = length
            self._body_ready = self._loop.create_future()
            timeout_s = self.door.relay.config.door.body_timeout_s  # a reload's, as aiohttp's
            try:
                async with LagForgivingTimeout(timeout_s):
                    await self._body_ready
            except TimeoutError:
                self.door.policy.metrics.timeouts.labels("body").inc()
                self._body_unread = True
                raise body_too_slow(timeout_s) from None
            finally:
                self._body_ready = None
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        self._body_left = 0
        return body

    # -- timers and the hand-over -------------------------------------------------------------

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_late(self) -> None:
        """No whole head within the header timeout: 408, then a lingering close."""
        self._timer = None
        if self.task is not None or self.transport is None or self._lost:
            return
        self.door.policy.metrics.timeouts.labels("headers").inc()
        self._buffer.clear()
        self._linger = HeadTimeoutLinger(self.transport, self._loop, answer=TIMEOUT_RESPONSE)

    def _idle_too_long(self) -> None:
        """Keep-alive: no request (or only part of a head) within the timeout."""
        self._timer = None
        if self.task is None and self.transport is not None and not self._lost:
            self.transport.close()

    def _hand_over(self, reason: str) -> None:
        """From here on aiohttp's server reads this connection: its handler gets the transport
        and every byte not yet taken by a request."""
        transport = self.transport
        if transport is None:
            return
        self.door.handed_over[reason] += 1
        self._cancel_timer()
        self._handed_over = True
        self.door.connections.discard(self)
        handler = self.door.hand_over(self._counted_as)
        self._counted_as = None  # released by the handler from now on
        pending, self._buffer = bytes(self._buffer), bytearray()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if pending:
            handler.data_received(pending)
        if self._read_paused:
            transport.resume_reading()
