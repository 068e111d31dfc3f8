"""Every HTTP door's runner: one request through the relay core, answered as SSE or one body.

A door passes its :class:`~gateway.doors.wire.DoorWire` (error shape, whole body, stream
events) and the request as a :class:`~gateway.doors.door_http.DoorHttp` (read by aiohttp's
server or by the lean door's own connections); everything else is here and in the door-neutral core (:mod:`gateway.lifecycle.core`).
Headers wait for the first token: until then a failure can still move to another backend
without the client noticing. Then ``Server-Timing`` and ``X-Meridian-Route`` go out with the
buffered first events, every later event is written as it arrives, and the last thing before
the terminal event is an SSE comment carrying the end-of-stream timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import orjson
from aiohttp import web

from gateway.auth.authenticator import authorize
from gateway.doors.door_http import AiohttpRequest, DoorHttp
from gateway.doors.wire import OPENAI_WIRE, DoorWire, StreamCodec
from gateway.errors import ApiError
from gateway.impossible import ImpossibleState, internal_error
from gateway.inbound import Endpoint, InboundRequest, request_id_from
from gateway.lifecycle.call import CoreCall
from gateway.lifecycle.core import Arrival, Exchange, refused
from gateway.opened_stream import OpenedStream
from gateway.sse import SseEvent, comment
from gateway.sse_writer import ClientTooSlow, RawOut, SseSink
from gateway.stream import StreamBroken
from gateway.timing import TimingEntry, render

TIMING_COMMENT_PREFIX = "meridian-timing "
_CLIENT_GONE = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


def _response_headers(request_id: str, opened: OpenedStream) -> dict[str, str]:
    headers = {
        "X-Request-Id": request_id,
        "X-Meridian-Route": opened.route.header(),
        "Server-Timing": render(opened.entries),
    }
    if opened.hop is not None:  # W3C Trace Context level 2: this hop's span, for the client
        headers["traceresponse"] = opened.hop.trace.traceparent()
    return headers


async def serve(
    request: web.Request, endpoint: Endpoint, wire: DoorWire = OPENAI_WIRE
) -> web.StreamResponse:
    """The aiohttp handler's side of :func:`run`."""
    return await run(AiohttpRequest(request), endpoint, wire) or _client_left()


async def run(
    http: DoorHttp, endpoint: Endpoint, wire: DoorWire = OPENAI_WIRE
) -> web.StreamResponse | None:
    """One request through the core: the response to send, or None when the answer was
    streamed to the client (or the client left before it)."""
    received_at = http.received_at
    relay, quotas = http.relay, http.quotas
    request_id = request_id_from(http.header("X-Request-Id"))
    try:
        principal = http.principal()
        arrival = Arrival(
            "http",
            endpoint,
            await http.read_body(),
            request_id,
            principal.tenant,  # from the key (gateway/auth), never a client header
            received_at,
            peer=http.remote,
            forwarded_for=http.header_all("X-Forwarded-For"),
            headers=http.headers(),
            key_id=principal.key_id,
            forward=http.passed_through(),
        )
    except (ApiError, ImpossibleState) as exc:  # before the core: no key, a bad or slow body
        refusal = exc if isinstance(exc, ApiError) else internal_error(request_id, "http", exc)
        refused(relay, "http", endpoint, request_id, received_at, None, refusal)
        return _refusal(wire, refusal, request_id)

    def check(parsed: InboundRequest) -> None:
        authorize(principal, parsed.model)  # 403: scope or model not allowed for this key
        quotas.admit(principal.key_id, principal.tenant, parsed.profile.prompt_tokens)  # 429

    call = CoreCall(relay, arrival, check)
    writer: SseSink | None = None
    try:  # whatever happens from here, the call is closed (released, counted) once
        try:
            inbound = call.accept()
            if inbound.stream and relay.config.streams.early_headers != "never":
                writer = http.sse()
                await _open_keeping_alive(call, writer, request_id)
            else:
                await call.open()
        except (ApiError, ImpossibleState) as exc:  # a refusal: the call counted it
            if isinstance(exc, ImpossibleState) and call.started:
                raise  # the door's own, after the open finished: ended as internal below
            error = exc if isinstance(exc, ApiError) else call.impossible(exc)
            if writer is not None and writer.started:
                return await _error_after_headers(writer, wire.stream_error(error))
            return _refusal(wire, error, request_id)
        return await _answer(http, call, writer, wire)
    except ImpossibleState as exc:
        if call.started:
            call.exchange.internal()
        error = internal_error(request_id, "http", exc)
        if writer is not None and writer.started:
            return await _error_after_headers(writer, wire.stream_error(error))
        return _refusal(wire, error, request_id)
    finally:
        call.close()
        if call.started:
            tokens = call.opened.exchange.output_tokens()
            quotas.charge(principal.key_id, principal.tenant, tokens)


def _refusal(wire: DoorWire, error: ApiError, request_id: str) -> web.Response:
    """``error`` as the door's error response. Its tracebacks (and those of the errors it
    was raised from) are let go: they hold the frames that raised and caught it, which hold
    the error, a cycle only a collection would free (a flood of refused requests made one
    every few hundred)."""
    cause: BaseException | None = error
    seen: set[int] = set()  # a chain made by hand could loop
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        cause.with_traceback(None)  # not ``__traceback__ =``: ApiError is a frozen dataclass
        cause = cause.__cause__ or cause.__context__
    return wire.error_response(error, {"X-Request-Id": request_id})


async def _answer(
    http: DoorHttp, call: CoreCall, writer: SseSink | None, wire: DoorWire
) -> web.StreamResponse | None:
    """The opened call, as one body or as a stream."""
    exchange = call.exchange
    inbound, opened = exchange.inbound, exchange.opened
    request_id = inbound.request_id
    if not inbound.stream:
        exchange.completed()
        return _whole_body(
            request_id, opened, wire.whole_body(inbound, opened, opened.exchange.body or b"")
        )
    writer = writer or http.sse()
    await _relay_stream(http, writer, request_id, call, exchange, wire.codec(inbound, opened))
    return writer.reply()


async def _open_keeping_alive(call: CoreCall, writer: SseSink, request_id: str) -> OpenedStream:
    """Open while sending SSE comment keepalives; the headers go out early (operator's choice).
    If the door fails (the client left) after the open finished, the caller's ``call.close()``
    ends the request like any other: released, counted."""
    streams = call.relay.config.streams
    task = asyncio.ensure_future(call.open())
    headers = {"X-Request-Id": request_id}
    try:
        if streams.early_headers == "always":
            await writer.start(headers, flush=True)
        while True:
            done, _ = await asyncio.wait({task}, timeout=streams.keepalive_s)
            if done:
                return task.result()
            if not writer.started:
                await writer.start(headers, flush=True)
            await writer.keepalive()
    except BaseException:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, ApiError):
                await task
        elif not task.cancelled():
            task.exception()  # retrieved: a refusal was counted by the call
        raise


def _client_left() -> web.Response:
    """What a handler returns when the client left before the headers: never sent (aiohttp
    drops it quietly on the closed connection); 499 in the access log, as nginx writes it."""
    return web.Response(status=499)


async def _error_after_headers(writer: SseSink, event: bytes) -> web.StreamResponse | None:
    """Every attempt failed after early headers committed a 200: the error is an event."""
    with contextlib.suppress(*_CLIENT_GONE, ClientTooSlow, ImpossibleState):
        await writer.fail(event)
    return writer.reply()


def _whole_body(request_id: str, opened: OpenedStream, body: bytes | None) -> web.Response:
    if opened.exchange.body is None:
        raise ImpossibleState("a non-streaming exchange without its body")
    now = time.perf_counter()
    summary = opened.summary(now)
    headers = _response_headers(request_id, opened)
    headers["Server-Timing"] += ", " + TimingEntry("e2e", summary["e2e_ms"]).render()
    headers["X-Meridian-Timing"] = orjson.dumps(summary).decode()
    return web.Response(
        status=200,
        body=body,
        headers=headers,
        content_type=opened.exchange.response.content_type or "application/json",
    )


async def _relay_stream(
    http: DoorHttp,
    writer: SseSink,
    request_id: str,
    call: CoreCall,
    exchange: Exchange,
    codec: StreamCodec,
) -> None:
    """Write the call's raw view; tells its ``exchange`` (``call.exchange``) how it ended (it
    stays cancelled if the client went away)."""
    opened = exchange.opened
    safety = http.relay.safety
    writer.track_upstream(opened.exchange.buffered_bytes)
    safety.stream_started(writer)
    try:
        if writer.started:  # early headers: the route is known only now
            await writer.write(comment("meridian-route " + opened.route.header()))
        else:
            await writer.start(_response_headers(request_id, opened))
        # None: the bytes as they came (no call per event, here and in the pusher).
        encode = None if codec.passes_raw else codec.encode
        # One upstream read -> one write; what flows is written inside the upstream callback
        # (gateway/push_phase.py): only the stream's edges come through this loop.
        async for batch in call.batches(_Pusher(writer, encode)):
            if not batch:  # the push stopped: the client is behind its mark
                await writer.caught_up()
                continue
            parts: list[bytes] = []
            for event in batch:
                if event is opened.exchange.ended_by:  # [DONE], response.completed, message_stop
                    parts.append(comment(TIMING_COMMENT_PREFIX + _summary_json(opened)))
                    parts.append(event.raw if encode is None else encode(event))
                    await writer.end(b"".join(parts))
                    exchange.completed()
                    return
                parts.append(event.raw if encode is None else encode(event))
            if out := b"".join(parts):
                await writer.write(out)
        raise StreamBroken("upstream_truncated", "upstream stream ended without its last event")
    except StreamBroken as broken:
        exchange.broke(broken)
        with contextlib.suppress(*_CLIENT_GONE, ClientTooSlow):
            await writer.write(codec.error_event(broken.error))
            await writer.write(comment(TIMING_COMMENT_PREFIX + _summary_json(opened)))
    except ClientTooSlow as slow:
        exchange.client_too_slow(slow)
        writer.abort()
    except _CLIENT_GONE:
        pass  # the exchange stays cancelled: the client went away
    finally:
        safety.stream_ended(writer)


class _Pusher:
    """The push phase's writer (``gateway.push_phase.Pusher``): a read's events, one write."""

    __slots__ = ("_encode", "_push", "_writer")

    def __init__(self, writer: SseSink, encode: Callable[[SseEvent], bytes] | None) -> None:
        """``encode``: the codec's, or None when it passes the bytes as they came."""
        self._writer, self._push = writer, writer.push
        self._encode = encode

    def ready(self) -> bool:
        return self._writer.pushable

    def raw(self) -> RawOut | None:
        return self._writer.raw_out() if self._encode is None else None

    def __call__(self, events: list[SseEvent]) -> bool:
        encode = self._encode
        if encode is None:  # the bytes as they came
            if len(events) == 1:
                return self._push(events[0].raw)
            return self._push(b"".join([event.raw for event in events]))
        return self._push(b"".join([encode(event) for event in events]))


def _summary_json(opened: OpenedStream) -> str:
    return orjson.dumps(opened.summary(time.perf_counter())).decode()
