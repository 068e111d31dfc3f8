"""One client connection of the h2 engine: an ``asyncio.Protocol`` over an ``h2`` connection.

h2 does the HTTP/2 state machine with no I/O; this class feeds it the socket's bytes, turns
its events into calls (:mod:`gateway.grpc_h2.call`) and writes what it has to send. Writes are
coalesced per loop iteration (one ``transport.write`` for everything the calls produced in it:
a call's HEADERS and first DATA leave together). Outbound DATA respects the peer's stream and
connection windows and the transport's own back-pressure (``pause_writing``); inbound DATA is
acknowledged once its messages are read (:meth:`Call.received`). Its age and idleness are
bounded by :mod:`gateway.grpc_h2.lifetime` (a graceful GOAWAY, then it closes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, cast

import grpc
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from gateway.grpc_h2.call import Call, Cancel
from gateway.grpc_h2.flood import FloodGuard
from gateway.grpc_h2.h2_parts import H2_CONFIG, PlainEncoder, RefusingH2Connection, peer_string
from gateway.grpc_h2.lifetime import Lifetime
from gateway.grpc_h2.wire import RESPONSE_HEADERS, Header, WireError, call_headers, status_headers
from gateway.http_socket.protocol import connection_ends

if TYPE_CHECKING:
    from gateway.grpc_h2.server import H2GrpcServer

log = logging.getLogger("meridian.grpc")


class GrpcConnection(asyncio.Protocol):
    def __init__(self, server: H2GrpcServer) -> None:
        self.server = server
        self.limits = server.limits
        self.loop = asyncio.get_running_loop()
        self.h2 = RefusingH2Connection(H2_CONFIG)
        self.h2.encoder = PlainEncoder()
        self.calls: dict[int, Call] = {}
        self.peer = ""
        self.transport: asyncio.Transport | None = None
        self._flush_pending = False
        self._paused = False
        self._handshake: asyncio.TimerHandle | None = None
        self._keepalive: asyncio.TimerHandle | None = None
        self._heard = False  # a byte from the client since the last keepalive check
        self._ping_sent = False
        self._flood = FloodGuard(self.limits.flood, self.loop.time())
        self._counted_as: str | None = None  # the client, when the connection caps count it
        self._lifetime = Lifetime(self.limits.lifetime, self, self.loop)

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        caps = self.server.caps
        if caps is not None:
            client, local_port = connection_ends(transport)
            if not caps.admit(client, local_port):
                transport.close()  # before a byte is read, as the HTTP door refuses
                return
            self._counted_as = client
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.peer = peer_string(self.transport.get_extra_info("peername"))
        self.h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.limits.max_concurrent_streams,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: self.h2.DEFAULT_MAX_HEADER_LIST_SIZE,
            },
        )
        self.h2.initiate_connection()
        self._write()
        self._handshake = self.loop.call_later(self.limits.handshake_timeout_s, self._no_handshake)
        self._schedule_keepalive(self.limits.keepalive_time_s)
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self._heard = True
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as err:
            log.info("gRPC (h2) connection from %s broke the protocol: %s", self.peer, err)
            self._write()  # h2's GOAWAY
            self.close()
            self.server.closed("protocol_error")
            return
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                self._on_data(event)
            elif isinstance(event, h2.events.RequestReceived):
                self._flood.on_stream_opened()
                self._on_request(event)
            elif isinstance(event, h2.events.StreamEnded):
                call = self.calls.get(event.stream_id)
                if call is not None:
                    call.request_ended()
            elif isinstance(event, h2.events.StreamReset):
                call = self.calls.pop(event.stream_id, None)
                if call is not None:
                    call.cancel(Cancel.RESET)
                    if flood := self._flood.on_client_reset():
                        self.calm_down(flood)
                        return
            elif isinstance(event, h2.events.WindowUpdated):
                self._wake_writers(event.stream_id)
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                if flood := self._flood.on_settings(self.loop.time()):
                    self.calm_down(flood)
                    return
                if self._handshake is not None:
                    self._handshake.cancel()
                    self._handshake = None
                    self._lifetime.started(idle=not self.calls)
                self._wake_writers(0)  # INITIAL_WINDOW_SIZE may have grown every window
            elif isinstance(event, h2.events.PingReceived):
                if flood := self._flood.on_ping(self.loop.time()):
                    self.calm_down(flood)
                    return
            elif isinstance(event, h2.events.PingAckReceived):
                if self._lifetime.ping_acked(event.ping_data or b"") or not self._ping_sent:
                    continue
                self._ping_sent = False  # answered: the next check a whole period from now
                self._schedule_keepalive(self.limits.keepalive_time_s)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.close()
        self._write()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted_as is not None and self.server.caps is not None:
            self.server.caps.release(self._counted_as)
            self._counted_as = None
        for timer in (self._handshake, self._keepalive):
            if timer is not None:
                timer.cancel()
        self._lifetime.stop()
        for call in list(self.calls.values()):
            call.cancel(Cancel.LOST)
        self.calls.clear()
        self.transport = None
        self.server.connections.discard(self)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers(0)

    # -- inbound ------------------------------------------------------------------------------

    def _on_request(self, event: h2.events.RequestReceived) -> None:
        stream_id = event.stream_id
        ended = event.stream_ended is not None
        if self.server.stopping or self._lifetime.refuses(stream_id):
            self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        try:
            headers = call_headers(event.headers or ())
            handler = self.server.method(headers.path)
            if handler is None:
                raise WireError(grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {headers.path}")
        except WireError as err:
            status = status_headers(err.code, err.details, [])
            self.h2.send_headers(stream_id, [*RESPONSE_HEADERS, *status], end_stream=True)
            if not ended:  # unless its END_STREAM is already in this read: then it is closed
                with contextlib.suppress(h2.exceptions.StreamClosedError):
                    self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)
            return
        call = Call(self, stream_id, handler, headers, self.limits)
        self.calls[stream_id] = call
        if len(self.calls) == 1:
            self._lifetime.busy()
        if ended:
            call.request_ended()
        call.start()

    def _on_data(self, event: h2.events.DataReceived) -> None:
        call = self.calls.get(event.stream_id)
        if call is None:  # a call that already ended: its bytes are dropped, its window kept
            self.acknowledge(event.stream_id, event.flow_controlled_length)
            return
        call.received(event.data or b"", event.flow_controlled_length)

    def acknowledge(self, stream_id: int, size: int) -> None:
        if size and self.transport is not None:
            # A closed stream's bytes still count against the connection's window: h2 gives
            # that back and skips the stream's own.
            self.h2.acknowledge_received_data(size, stream_id)
            self._schedule_write()

    # -- outbound (for calls) -----------------------------------------------------------------

    def send_headers(self, stream_id: int, headers: list[Header]) -> None:
        self.h2.send_headers(stream_id, headers)
        self._flood.on_sent()
        self._schedule_write()

    async def send_data(self, call: Call, data: bytes) -> None:
        """All of ``data`` in frames within the peer's windows and frame size, waiting while
        the windows are shut or the socket is full; no progress for ``write_stall_timeout_s``
        and the call is reset (:meth:`Call.wait_writable`)."""
        h2conn, stream_id = self.h2, call.stream_id
        stalled_until: float | None = None  # set when a wait starts, cleared by progress
        while True:
            if self.transport is None:
                raise ConnectionError("the gRPC connection is closed")
            size = 0 if self._paused else h2conn.local_flow_control_window(stream_id)
            size = min(size, h2conn.max_outbound_frame_size)
            if len(data) <= size:
                h2conn.send_data(stream_id, data)
                self._flood.on_sent()
                break
            if size > 0:  # a frame's worth now, the rest in the next round
                h2conn.send_data(stream_id, data[:size])
                data = data[size:]
                stalled_until = None
                continue
            self._schedule_write()
            if stalled_until is None:
                stalled_until = self.loop.time() + self.limits.write_stall_timeout_s
            await call.wait_writable(stalled_until)
        self._schedule_write()

    def end_call(self, call: Call, headers: list[Header], reset: bool) -> None:
        """The call's status (trailers, or the whole trailers-only response)."""
        self._forget(call)
        if self.transport is None:
            return
        try:
            self.h2.send_headers(call.stream_id, headers, end_stream=True)
            if reset:  # the client is still sending: tell it to stop (gRPC's NO_ERROR reset)
                self.h2.reset_stream(call.stream_id, h2.errors.ErrorCodes.NO_ERROR)
        except h2.exceptions.StreamClosedError:
            pass  # reset by the client meanwhile
        self._schedule_write()

    def drop_call(self, call: Call, reset: bool) -> None:
        self._forget(call)
        if reset and self.transport is not None:
            with contextlib.suppress(h2.exceptions.StreamClosedError):
                self.h2.reset_stream(call.stream_id, h2.errors.ErrorCodes.CANCEL)
            self._schedule_write()

    def _forget(self, call: Call) -> None:
        if self.calls.get(call.stream_id) is call:
            del self.calls[call.stream_id]
            if not self.calls:
                self._lifetime.idle()
        if call.unacked:  # bytes it never read: the connection's window must not shrink
            self.acknowledge(call.stream_id, call.unacked)
            call.unacked = 0
        self.server.call_ended()

    # -- writing ------------------------------------------------------------------------------

    def _schedule_write(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self._write)

    def _write(self) -> None:
        self._flush_pending = False
        data = self.h2.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)
            self.server.transport_writes += 1

    def _wake_writers(self, stream_id: int) -> None:
        if stream_id:
            call = self.calls.get(stream_id)
            if call is not None:
                call.wake()
        else:
            for call in self.calls.values():
                call.wake()

    def _keepalive_due(self) -> None:
        """Every keepalive_time_s: silent since the last check -> PING (and wait for its ACK
        at most keepalive_timeout_s); a PING still unanswered -> the peer is gone."""
        limits = self.limits
        if self.transport is None or self.transport.is_closing():
            return
        if self._ping_sent:
            log.info("gRPC (h2) connection from %s did not answer a keepalive PING", self.peer)
            self.close()
            self.server.closed("keepalive_timeout")
            return
        if self._heard:
            self._heard = False
            delay = limits.keepalive_time_s
        else:
            self._ping_sent = True
            self.h2.ping(b"meridian")
            self._write()
            delay = limits.keepalive_timeout_s
        self._schedule_keepalive(delay)

    def _schedule_keepalive(self, delay: float) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._keepalive = self.loop.call_later(delay, self._keepalive_due)

    def _no_handshake(self) -> None:
        self._handshake = None
        log.info("gRPC (h2) connection from %s sent no HTTP/2 preface in time", self.peer)
        self.close()
        self.server.closed("no_handshake")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- for its lifetime (gateway/grpc_h2/lifetime.py's Drainable) ---------------------------

    def open_calls(self) -> int:
        return len(self.calls)

    def last_stream_id(self) -> int:
        return int(self.h2.highest_inbound_stream_id)

    def send_frame(self, frame: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            self._write()
            transport.write(frame)

    def send_ping(self, data: bytes) -> None:
        transport = self.transport  # closing: h2 may be CLOSED already, and would raise
        if transport is not None and not transport.is_closing():
            self.h2.ping(data)
            self._write()

    def end_calls(self) -> None:
        for call in list(self.calls.values()):
            call.cancel(Cancel.SHUTDOWN)

    def finish(self, reason: str) -> None:
        self._write()
        self.close()
        self.server.closed(reason)

    def calm_down(self, reason: str) -> None:
        """Over a flood bound (gateway/grpc_h2/flood.py): GOAWAY ENHANCE_YOUR_CALM with the
        reason, as grpc-core sends it, and close (the calls are cancelled as the connection
        goes)."""
        log.warning("gRPC (h2) connection from %s closed: %s", self.peer, reason)
        if self.transport is not None:
            code = h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
            self.h2.close_connection(error_code=code, additional_data=reason.encode())
            self._write()
        self.close()
        self.server.closed(reason)

    def goaway(self) -> None:
        """Tell the client the connection is closing (after every call has ended)."""
        if self.transport is not None:
            self.h2.close_connection()
            self._write()
