"""The gateway's aiohttp server with a per-connection handler of its own.

aiohttp answers a request it cannot parse (a control byte in a header, a bad Content-Length)
with a text body that quotes the offending line — often ``Authorization: Bearer <key>`` — and
logs it with a traceback, once per request. :class:`DoorRequestHandler` answers in the OpenAI
shape with fixed words instead, and logs one line naming only the status and the peer.

Each request's arrival is the moment the read that completed its head returned
(:func:`head_arrival`), not the moment its handler started: what aiohttp and the middlewares do
in between, and the wait of a pipelined request behind the one before it, are the gateway's
time, and the ``gw`` and ``ttft`` timing entries, deadlines and durations count them.

A head that never finishes gets a 408, then the socket *lingers* (:class:`HeadTimeoutLinger`)
instead of closing at once: closing a socket whose partial head the loop has not read yet is a
reset, and a reset can cost the client the 408 written just before it. A body that never
finishes lingers the same bounded time (:meth:`DoorRequestHandler.linger_briefly`, through
aiohttp's own lingering read of the rest of the body).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from gateway.http_socket.policy import DoorPolicy

log = logging.getLogger("meridian.door")

_WORDS = {
    400: ("malformed HTTP request", "invalid_request_error", "malformed_request"),
    408: ("request not received in time", "invalid_request_error", "request_timeout"),
    413: ("request is too large", "invalid_request_error", "request_too_large"),
    431: ("request headers are too large", "invalid_request_error", "headers_too_large"),
    500: ("internal gateway error", "server_error", "internal_error"),
    504: ("internal gateway timeout", "server_error", "internal_timeout"),
}


def error_body(status: int) -> bytes:
    message, kind, code = _WORDS.get(
        status, ("request failed", "invalid_request_error", "http_error")
    )
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return orjson.dumps(body)


# After a head-timeout 408: how long, and for how many more bytes, the socket is read (and what
# it reads thrown away) before it is closed, so the close is a FIN after the 408, not a reset.
# Bounded both ways: a slowloris client cannot hold the socket longer or feed it more.
LINGER_S = 2.0
LINGER_BYTES = 64 * 1024

TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
    + f"Content-Length: {len(error_body(408))}\r\n\r\n".encode()
    + error_body(408)
)


def head_arrival(request: web.BaseRequest) -> float:
    """When ``request`` arrived: the time of the read that completed the latest head parsed on
    its connection. Read at the handler's start, that is this request's own head or (pipelined)
    one that came with or after it, never an earlier request's: so the time is never before the
    request arrived nor after its handler began. Now, for a request not read by this handler."""
    protocol = request.protocol
    if isinstance(protocol, DoorRequestHandler) and protocol.head_at is not None:
        return protocol.head_at
    return time.perf_counter()


def connection_ends(transport: asyncio.BaseTransport) -> tuple[str, int | str | None]:
    """The client's address ("unix" on a Unix socket) and the local port (or socket path) a
    connection came in on: what the connection caps count and the admin ports exempt."""
    peer = transport.get_extra_info("peername")
    local = transport.get_extra_info("sockname")
    client = str(peer[0]) if isinstance(peer, tuple) else "unix"
    local_port: int | str | None = local if isinstance(local, str) else None
    if isinstance(local, tuple) and len(local) >= 2:
        local_port = int(local[1])
    return client, local_port


class HeadTimeoutLinger:
    """The 408 (or ``answer``) is written, the write side shut (the client reads the answer, then EOF), and
    what the client still sends is read and dropped until it closes, :data:`LINGER_BYTES` more
    arrive or :data:`LINGER_S` pass; only then is the socket closed, with nothing unread."""

    def __init__(
        self,
        transport: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        answer: bytes = TIMEOUT_RESPONSE,
    ) -> None:
        self.transport = transport
        self.left = LINGER_BYTES
        self.timer = loop.call_later(LINGER_S, self.close)
        if answer:
            transport.write(answer)
        if transport.can_write_eof():  # TLS cannot half-close: Connection: close says it
            transport.write_eof()
        if not transport.is_reading():  # what is unread must be read, or the close resets
            transport.resume_reading()

    def discard(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            self.close()

    def close(self) -> None:
        self.timer.cancel()
        self.transport.close()


class DoorRequestHandler(RequestHandler):
    """Adds to aiohttp's handler: connection caps, a deadline for the first request head, and
    error answers that reflect nothing."""

    def __init__(
        self,
        manager: web.Server,
        *,
        door: DoorPolicy | None = None,
        admitted_as: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(manager, **kwargs)
        self._door = door
        # Counted in by the lean door before it handed the connection over (gateway/lean_door).
        self._admitted_as = admitted_as
        self._counted_as: str | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger: HeadTimeoutLinger | None = None
        self.send_buffer: int | None = None  # SO_SNDBUF as an SSE response last set it
        # perf_counter() of the read that completed the latest request head (head_arrival).
        self.head_at: float | None = None
        # While the door waits for a request's body under its deadline (the lean door's
        # connections say the same): what a test of that deadline waits for.
        self.reading_body = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        door = self._door
        if door is None:
            return
        client, local_port = connection_ends(transport)
        if local_port in door.exempt_ports:
            return
        if self._admitted_as is not None:
            client = self._admitted_as
        elif not door.admit(client, local_port):
            self.force_close()  # before a byte is read: the cheapest refusal there is
            return
        self._counted_as = client
        self._head_timer = self._loop.call_later(door.config.header_timeout_s, self._head_late)

    def linger_briefly(self) -> None:
        """After a body-timeout 408: read and drop what the slow client still sends for
        :data:`LINGER_S` at most (aiohttp's default is 10 s), so the close after the answer is
        a FIN, not a reset, and a slow client does not hold the socket longer."""
        self._lingering_time = min(self._lingering_time, LINGER_S)

    def skip_lingering(self) -> None:
        """Close right after this response instead of reading the rest of the body for up to
        aiohttp's lingering time (10 s): for a body the client was told not to send."""
        self._lingering_time = 0.0

    def data_received(self, data: bytes) -> None:
        if self._linger is not None:  # answered 408: what still comes is read and dropped
            self._linger.discard(len(data))
            return
        read_at = time.perf_counter()
        heads = self._request_count
        super().data_received(data)
        if self._request_count != heads:
            self.head_at = read_at
        if self._head_timer is not None and (self._messages or self._request_in_progress):
            self._head_timer.cancel()  # a whole head arrived; keep-alive bounds the next ones
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self._messages or self._request_in_progress or self.transport is None:
            return
        if self._door is not None:  # set when the connection was admitted
            self._door.metrics.timeouts.labels("headers").inc()
        # aiohttp's force_close() without closing the transport: the handler's wait for a
        # request ends, and no request is parsed from here on; the linger closes the socket
        # (the client's EOF closes it too: eof_received lets the transport close).
        self._force_close = True
        if self._waiter is not None:
            self._waiter.cancel()
        self._linger = HeadTimeoutLinger(self.transport, self._loop)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._linger is not None:
            self._linger.timer.cancel()
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._counted_as is not None and self._door is not None:
            self._door.release(self._counted_as)
            self._counted_as = None
        super().connection_lost(exc)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # Never the exception text or traceback: a parse error quotes the raw header line.
        kind = type(exc).__name__ if exc is not None else "none"
        if status >= 500:
            log.error("request failed before a handler answered status=%d error=%s", status, kind)
        else:
            log.info("refused a malformed request status=%d error=%s", status, kind)
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot send the error")
        response = web.Response(
            status=status, body=error_body(status), content_type="application/json"
        )
        response.force_close()
        return response


class DoorServer(web.Server):
    """An aiohttp ``Server`` whose connections are :class:`DoorRequestHandler`; it also shuts
    down the lean door's connections (``lean``: gateway/lean_door), which read a listener's
    streaming requests without it."""

    door: DoorPolicy | None = None
    lean: LeanShutdown | None = None

    def __call__(self) -> RequestHandler:
        return self.handler(None)

    def handler(self, admitted_as: str | None) -> DoorRequestHandler:
        """A connection's handler; ``admitted_as``: already counted in by the lean door."""
        return DoorRequestHandler(
            self, door=self.door, admitted_as=admitted_as, loop=self._loop, **self._kwargs
        )

    def pre_shutdown(self) -> None:
        super().pre_shutdown()
        if self.lean is not None:
            self.lean.pre_shutdown()

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (aiohttp's)
        if self.lean is not None:
            await asyncio.gather(super().shutdown(timeout), self.lean.shutdown(timeout))
        else:
            await super().shutdown(timeout)


class LeanShutdown(Protocol):
    def pre_shutdown(self) -> None: ...

    async def shutdown(self, timeout_s: float | None) -> None: ...


class DoorRunner(web.AppRunner):
    """``web.AppRunner`` serving through :class:`DoorServer`; ``door`` adds caps and timeouts."""

    def __init__(self, app: web.Application, *, door: DoorPolicy | None = None, **kwargs: Any):
        super().__init__(app, **kwargs)
        self._door = door

    async def _make_server(self) -> web.Server:
        base = await super()._make_server()
        # Same construction as aiohttp's Application._make_handler, with our handler class.
        kwargs: dict[str, Any] = dict(base._kwargs)
        server = DoorServer(
            base.request_handler,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            **kwargs,
        )
        server.door = self._door
        return server
