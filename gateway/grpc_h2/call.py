"""One gRPC call on the h2 engine: its request messages in, the servicer run as one task, its
messages and status out.

Lifecycle: HEADERS arrive -> the task starts -> the request message(s) are read (each read
bounded by ``read_timeout_s``) -> the servicer runs with an :class:`H2ServicerContext` -> the
call ends exactly once, with trailers (or a trailers-only response when nothing was sent), or
by a reset. The task is cancelled when the client resets the stream, the connection is lost,
the ``grpc-timeout`` deadline passes (then DEADLINE_EXCEEDED is sent) or the server stops (then
UNAVAILABLE); the servicer's own cleanup (``aclosing`` of the backend stream) cancels the
upstream request on the way out.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from enum import Enum
from typing import TYPE_CHECKING, Any

import grpc

from gateway.grpc_h2.context import H2ServicerContext
from gateway.grpc_h2.limits import H2Limits
from gateway.grpc_h2.wire import (
    RESPONSE_HEADERS,
    CallHeaders,
    Header,
    MessageReader,
    Metadata,
    WireError,
    frame,
    status_headers,
)
from gateway.lag_timeout import ForgivingTimer

if TYPE_CHECKING:
    from gateway.grpc_h2.connection import GrpcConnection

log = logging.getLogger("meridian.grpc")


class Cancel(Enum):
    RESET = "reset"  # the client sent RST_STREAM: nothing more is sent
    LOST = "lost"  # the connection is gone
    DEADLINE = "deadline"  # grpc-timeout passed: DEADLINE_EXCEEDED
    SHUTDOWN = "shutdown"  # the server stops: UNAVAILABLE
    STALLED = "stalled"  # the client stopped reading: RST_STREAM CANCEL


class Call:
    def __init__(
        self,
        connection: GrpcConnection,
        stream_id: int,
        handler: Any,  # grpc.RpcMethodHandler
        headers: CallHeaders,
        limits: H2Limits,
    ) -> None:
        self.connection = connection
        self.stream_id = stream_id
        # perf_counter() when its HEADERS were read: the call's arrival (the servicer starts only
        # once the request message is in, and the wait for it is the gateway's to count too).
        self.arrived_at = time.perf_counter()
        self.handler = handler
        self.metadata: Metadata = headers.metadata
        self.limits = limits
        self.loop = connection.loop
        self.deadline = None if headers.timeout_s is None else self.loop.time() + headers.timeout_s
        self.context = H2ServicerContext(self, handler.response_serializer)
        self.messages: deque[bytes] = deque()
        self.reader = MessageReader(limits.max_receive_message_bytes, headers.encoding)
        self.inbound_error: WireError | None = None
        self.request_done = False
        self.unacked = 0  # flow-controlled bytes held back until their messages are read
        self.headers_sent = False
        self.initial: list[Header] | None = None  # held initial metadata, as header fields
        self.ended = False
        self.cancelled = False
        self.cancel_reason: Cancel | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def peer(self) -> str:
        return self.connection.peer

    @property
    def waiting(self) -> bool:
        """The call waits for its client: the next request message, or room to write."""
        return self._waiter is not None

    def start(self) -> None:
        self.task = self.loop.create_task(self._run())
        self.task.add_done_callback(self._task_done)
        if self.deadline is not None:
            self._timer = self.loop.call_at(self.deadline, self.cancel, Cancel.DEADLINE)

    def time_remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - self.loop.time())

    # -- from the connection ------------------------------------------------------------------

    def received(self, data: bytes, flow_controlled: int) -> None:
        if self.inbound_error is None:
            try:
                self.messages.extend(self.reader.feed(data))
            except WireError as err:
                self.inbound_error = err
        if self.messages:
            self.unacked += flow_controlled  # back-pressure: acked when read
        else:
            self.connection.acknowledge(self.stream_id, flow_controlled)
        self.wake()

    def request_ended(self) -> None:
        self.request_done = True
        self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def cancel(self, reason: Cancel) -> None:
        if self.ended or self.cancel_reason is not None:
            return
        self.cancel_reason = reason
        self.cancelled = reason is not Cancel.SHUTDOWN
        if self.task is not None:
            self.task.cancel()

    # -- for the servicer (through the context) -----------------------------------------------

    async def read(self) -> bytes | None:
        """The next request message; None once the client half-closed. The whole message must
        come within ``read_timeout_s`` (other wake-ups, such as window updates, do not count)."""
        timeout_at = self.loop.time() + self.limits.read_timeout_s
        while True:
            if self.messages:
                message = self.messages.popleft()
                if not self.messages and self.unacked:
                    self.connection.acknowledge(self.stream_id, self.unacked)
                    self.unacked = 0
                return message
            if self.inbound_error is not None:
                raise self.inbound_error
            if self.request_done:
                return None
            await self._wait(timeout_at, self._read_timed_out)

    def _read_timed_out(self) -> None:
        self.inbound_error = WireError(
            grpc.StatusCode.CANCELLED,
            f"no request message from the client within {self.limits.read_timeout_s:g} s",
        )
        self.wake()

    async def _wait(self, until: float, on_timeout: Callable[[], None]) -> None:
        """Until :meth:`wake` (the connection saw something for this call), or ``until``
        (loop time), when ``on_timeout`` runs. The client's deadline: time the loop was too
        busy to look is given back first (gateway/lag_timeout.py), so what the client sent in
        time wakes this call before the timer, run late, could end it."""
        self._waiter = self.loop.create_future()
        # From now: a wait begun past ``until`` (a wake-up that brought nothing) ends at once.
        timer = ForgivingTimer(self.loop, max(0.0, until - self.loop.time()), on_timeout)
        try:
            await self._waiter
        finally:
            timer.cancel()
            self._waiter = None

    async def wait_writable(self, stalled_until: float) -> None:
        """Until the flow-control window opens or the socket drains (woken by the connection);
        still shut at ``stalled_until`` and the call is lost (the client stopped reading)."""
        await self._wait(stalled_until, self._stalled)

    def _stalled(self) -> None:
        self.cancel(Cancel.STALLED)

    def hold_initial_metadata(self, metadata: list[Header]) -> None:
        if self.headers_sent or self.initial is not None:
            raise grpc.aio.UsageError("initial metadata was already sent")
        self.initial = metadata
        # Sent with the first message when it comes in this loop iteration (one write).
        self.loop.call_soon(self._send_headers_now)

    def _send_headers_now(self) -> None:
        if not self.headers_sent and not self.ended:
            self._send_headers()

    def _send_headers(self) -> None:
        self.headers_sent = True
        headers: list[Header] = [*RESPONSE_HEADERS, *(self.initial or ())]
        self.connection.send_headers(self.stream_id, headers)

    async def write(self, raw: bytes) -> None:
        if len(raw) > self.limits.max_send_message_bytes:
            self.context.code_value = grpc.StatusCode.RESOURCE_EXHAUSTED
            self.context.details_value = (
                f"Sent message larger than max ({len(raw)} vs. "
                f"{self.limits.max_send_message_bytes})"
            )
            raise grpc.aio.AbortError()
        if not self.headers_sent:
            self._send_headers()
        await self.connection.send_data(self, frame(raw))

    # -- the task -----------------------------------------------------------------------------

    async def _run(self) -> None:
        context = self.context
        try:
            await self._serve()
            code = context.code_value or grpc.StatusCode.OK
            details = context.details_value
        except grpc.aio.AbortError:
            code = context.code_value or grpc.StatusCode.UNKNOWN
            details = context.details_value
        except WireError as err:
            code, details = err.code, err.details
        except asyncio.CancelledError:
            reason = self.cancel_reason
            if reason is None:
                raise  # not ours: let it propagate
            if reason is Cancel.DEADLINE:
                code, details = grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"
            elif reason is Cancel.SHUTDOWN:
                code, details = grpc.StatusCode.UNAVAILABLE, "server shutting down"
            else:
                self._end_without_status(reason)
                return
        except Exception:
            log.exception("gRPC handler failed (h2 engine)")
            code, details = grpc.StatusCode.UNKNOWN, "unexpected error in the handler"
        finally:
            if self._timer is not None:
                self._timer.cancel()
        self._end(code, details, context.trailing)

    async def _serve(self) -> None:
        handler, context = self.handler, self.context
        request: Any
        if handler.request_streaming:
            request = self._requests(handler.request_deserializer)
        else:
            raw = await self.read()
            if raw is None:
                raise WireError(grpc.StatusCode.INTERNAL, "the request carried no message")
            request = _deserialized(handler.request_deserializer, raw)
        if handler.response_streaming:
            method = handler.stream_stream if handler.request_streaming else handler.unary_stream
            result = method(request, context)
            if hasattr(result, "__anext__"):
                async with aclosing(result):
                    async for message in result:
                        await context.write(message)
            elif inspect.isawaitable(result):
                await result
        else:
            method = handler.stream_unary if handler.request_streaming else handler.unary_unary
            response = method(request, context)
            if inspect.isawaitable(response):
                response = await response
            if response is not None:
                await context.write(response)

    async def _requests(self, deserialize: Callable[[bytes], Any] | None) -> AsyncIterator[Any]:
        while (raw := await self.read()) is not None:
            yield _deserialized(deserialize, raw)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A task cancelled before it first ran never reached ``_run``'s handlers: end it here.
        Either way the servicer is done with its context (``H2ServicerContext.detach``)."""
        self.context.detach()
        if self.ended:
            return
        reason = self.cancel_reason or Cancel.LOST
        if reason is Cancel.DEADLINE:
            self._end(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", [])
        elif reason is Cancel.SHUTDOWN:
            self._end(grpc.StatusCode.UNAVAILABLE, "server shutting down", [])
        else:
            self._end_without_status(reason)

    def _end(self, code: grpc.StatusCode, details: str, trailing: list[Header]) -> None:
        if self.ended:
            return
        self.ended = True
        if self.initial is not None and not self.headers_sent:
            self._send_headers()  # held metadata first, then the status (one write)
        status = status_headers(code, details, trailing)
        headers = status if self.headers_sent else [*RESPONSE_HEADERS, *status]  # trailers-only
        self.connection.end_call(self, headers, reset=not self.request_done)

    def _end_without_status(self, reason: Cancel) -> None:
        self.ended = True
        self.connection.drop_call(self, reset=reason is Cancel.STALLED)


def _deserialized(deserialize: Callable[[bytes], Any] | None, raw: bytes) -> Any:
    if deserialize is None:
        return raw
    try:
        return deserialize(raw)
    except Exception:
        raise WireError(grpc.StatusCode.INTERNAL, "could not deserialize the request") from None
