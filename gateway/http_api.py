"""The OpenAI-compatible HTTP door: request handlers and their response framing.

Headers wait for the first token: until then a failure can still move to another backend
without the client noticing. Then ``Server-Timing`` and ``X-Meridian-Route`` go out with the
buffered first events, every later event is written as it arrives, and the last thing before
``data: [DONE]`` is an SSE comment carrying the end-of-stream timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.admin import on_admin_listener
from gateway.auth.authenticator import authorize
from gateway.auth.wiring import principal_of
from gateway.chain.hop import HOP_HEADERS
from gateway.door.policy import DOOR, body_too_slow
from gateway.doors.models import model_object
from gateway.doors.wire import OPENAI_WIRE, DoorWire, StreamCodec
from gateway.errors import ApiError
from gateway.impossible import ImpossibleState, internal_error
from gateway.inbound import Endpoint, InboundRequest, parse_inbound, request_id_from
from gateway.lifecycle.outcome import against_backend, broken_ending
from gateway.objectives import apply as apply_objective
from gateway.quota.limiter import QUOTAS
from gateway.relay import Relay
from gateway.signals.outlier import FailureKind
from gateway.sse import comment
from gateway.sse_writer import ClientTooSlow, SseWriter
from gateway.state.wiring import STATE
from gateway.state_keys import METRICS, RELAY
from gateway.stream import OpenedStream, StreamBroken
from gateway.timing import TimingEntry, render
from gateway.workers.metrics_view import METRICS_VIEW

log = logging.getLogger("meridian.http")

TENANT_HEADER = "X-Meridian-Tenant"
TIMING_COMMENT_PREFIX = "meridian-timing "
_CLIENT_GONE = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


def _forward_headers(request: web.Request, request_id: str) -> dict[str, str]:
    headers = {"X-Request-Id": request_id}
    for name in HOP_HEADERS:  # gateway/chain/hop.py replaces them with this hop's
        value = request.headers.get(name)
        if value:
            headers[name] = value
    return headers


def _response_headers(request_id: str, opened: OpenedStream) -> dict[str, str]:
    headers = {
        "X-Request-Id": request_id,
        "X-Meridian-Route": opened.route.header(),
        "Server-Timing": render(opened.entries),
    }
    if opened.hop is not None:  # W3C Trace Context level 2: this hop's span, for the client
        headers["traceresponse"] = opened.hop.trace.traceparent()
    return headers


async def _read_body(request: web.Request) -> bytes:
    limit = request.app[RELAY].config.limits.max_body_bytes
    too_large = ApiError(
        413,
        f"request body is larger than the {limit}-byte limit",
        "invalid_request_error",
        "request_too_large",
    )
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    try:
        async with asyncio.timeout(request.app[RELAY].config.door.body_timeout_s):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_large from None
    except TimeoutError:
        request.app[DOOR].metrics.timeouts.labels("body").inc()
        raise body_too_slow(request.app[RELAY].config.door.body_timeout_s) from None


async def _completion(
    request: web.Request, endpoint: Endpoint, wire: DoorWire = OPENAI_WIRE
) -> web.StreamResponse:
    received_at = time.perf_counter()
    relay, metrics = request.app[RELAY], request.app[METRICS]
    quotas = request.app[QUOTAS]
    request_id = request_id_from(request.headers.get("X-Request-Id"))
    status_label = "error"
    model_label = "unknown"
    writer: SseWriter | None = None
    inbound: InboundRequest | None = None
    try:
        principal = principal_of(request)
        body = await _read_body(request)
        client = relay.fleet.locate(request.remote, request.headers.getall("X-Forwarded-For", None))
        inbound = parse_inbound(
            endpoint,
            body,
            request_id=request_id,
            tenant=principal.tenant,  # from the key (gateway/auth), never a client header
            origin=client.origin,
            known_models=relay.known_models,
            received_at=received_at,
        )
        authorize(principal, inbound.model)  # 403: scope or model not allowed for this key
        quotas.admit(principal.key_id, principal.tenant, inbound.profile.prompt_tokens)  # 429
        inbound = apply_objective(
            inbound, relay.config.objectives, request.headers, key_id=principal.key_id
        )
        model_label = inbound.model
        streams = relay.config.streams
        forward = _forward_headers(request, request_id)
        forward[TENANT_HEADER] = principal.tenant  # a chained gateway believes it from a hop
        if inbound.stream and streams.early_headers != "never":
            writer = SseWriter(request, streams)
            opened = await _open_keeping_alive(relay, inbound, forward, writer, request_id)
        else:
            opened = await relay.open(inbound, forward)
    except ApiError as err:
        status_label = str(err.status)
        if inbound is None:  # refused before the relay core saw it: the door logs it
            relay.observer.rejected("http", endpoint.value, request_id, err, received_at)
        if writer is not None and (response := writer.response) is not None:
            return await _error_after_headers(writer, response, wire.stream_error(err))
        return wire.error_response(err, {"X-Request-Id": request_id})
    except ImpossibleState as exc:
        status_label = "500"
        error = internal_error(request_id, "http", exc)
        if writer is not None and (response := writer.response) is not None:
            return await _error_after_headers(writer, response, wire.stream_error(error))
        return wire.error_response(error, {"X-Request-Id": request_id})
    finally:
        if status_label != "error":
            metrics.requests.labels("http", endpoint.value, model_label, status_label).inc()

    failure: FailureKind | None = FailureKind.CANCELLED  # until the response is complete
    ended = StreamEnd()
    try:
        if not inbound.stream:
            failure = None
            return _whole_body(
                request_id, opened, wire.whole_body(inbound, opened, opened.body or b"")
            )
        writer = writer or SseWriter(request, relay.config.streams)
        codec = wire.codec(inbound, opened)
        failure = await _relay_stream(request, writer, request_id, opened, ended, codec)
        return writer.response or _client_left()
    except ImpossibleState as exc:
        failure = FailureKind.CANCELLED  # the gateway's own fault, not the backend's
        ended.error = "internal_error"
        error = internal_error(request_id, "http", exc)
        if writer is not None and (response := writer.response) is not None:
            return await _error_after_headers(writer, response, wire.stream_error(error))
        return wire.error_response(error, {"X-Request-Id": request_id})
    finally:
        relay.finish(inbound, opened, time.perf_counter(), failure, ended.error)
        quotas.charge(principal.key_id, principal.tenant, opened.output_tokens())
        outcome = "200" if failure is None else failure.value
        metrics.requests.labels("http", endpoint.value, model_label, outcome).inc()


async def _open_keeping_alive(
    relay: Relay,
    inbound: InboundRequest,
    forward: dict[str, str],
    writer: SseWriter,
    request_id: str,
) -> OpenedStream:
    """Open while sending SSE comment keepalives; the headers go out early (operator's choice)."""
    streams = relay.config.streams
    task = asyncio.ensure_future(relay.open(inbound, forward))
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
        elif not task.cancelled() and task.exception() is None:
            relay.finish(inbound, task.result(), time.perf_counter(), FailureKind.CANCELLED)
        raise


def _client_left() -> web.Response:
    """What a handler returns when the client left before the headers: never sent (aiohttp
    drops it quietly on the closed connection); 499 in the access log, as nginx writes it."""
    return web.Response(status=499)


async def _error_after_headers(
    writer: SseWriter, response: web.StreamResponse, event: bytes
) -> web.StreamResponse:
    """Every attempt failed after early headers committed a 200: the error is an event."""
    with contextlib.suppress(*_CLIENT_GONE, ClientTooSlow, ImpossibleState):
        await writer.write(event)
        await response.write_eof()
    return response


def _whole_body(request_id: str, opened: OpenedStream, body: bytes | None) -> web.Response:
    if opened.body is None:
        raise ImpossibleState("a non-streaming exchange without its body")
    now = time.perf_counter()
    try:
        usage = orjson.loads(opened.body).get("usage")
        if isinstance(usage, dict):
            opened.usage = usage
    except (orjson.JSONDecodeError, AttributeError):
        pass
    summary = opened.summary(now)
    headers = _response_headers(request_id, opened)
    headers["Server-Timing"] += ", " + TimingEntry("e2e", summary["e2e_ms"]).render()
    headers["X-Meridian-Timing"] = orjson.dumps(summary).decode()
    return web.Response(
        status=200,
        body=body,
        headers=headers,
        content_type=opened.response.content_type or "application/json",
    )


class StreamEnd:
    """How a relayed stream ended, for the request log: the error kind, if it failed."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: str | None = None


async def _relay_stream(
    request: web.Request,
    writer: SseWriter,
    request_id: str,
    opened: OpenedStream,
    ended: StreamEnd,
    codec: StreamCodec,
) -> FailureKind | None:
    """Write the stream; returns how it failed (None when complete)."""
    safety = request.app[RELAY].safety
    writer.track_upstream(opened.buffered_bytes)
    safety.stream_started(writer)
    try:
        if writer.started:  # early headers: the route is known only now
            await writer.write(comment("meridian-route " + opened.route.header()))
        else:
            await writer.start(_response_headers(request_id, opened))
        async for batch in opened.all_batches():  # one upstream read -> one write
            parts: list[bytes] = []
            for event in batch:
                if event is opened.ended_by:  # [DONE], response.completed, message_stop
                    parts.append(comment(TIMING_COMMENT_PREFIX + _summary_json(opened)))
                    parts.append(codec.encode(event))
                    await writer.end(b"".join(parts))
                    return None
                parts.append(codec.encode(event))
            if out := b"".join(parts):
                await writer.write(out)
        raise StreamBroken("upstream_truncated", "upstream stream ended without its last event")
    except StreamBroken as broken:
        ended.error = broken.kind
        level = logging.ERROR if broken.kind == "internal_error" else logging.WARNING
        log.log(
            level,
            "stream broke request_id=%s backend=%s kind=%s",
            request_id,
            opened.route.backend,
            broken.kind,
        )
        request.app[METRICS].stream_errors.labels(opened.route.backend, broken.kind).inc()
        with contextlib.suppress(*_CLIENT_GONE, ClientTooSlow):
            await writer.write(codec.error_event(broken.error))
            await writer.write(comment(TIMING_COMMENT_PREFIX + _summary_json(opened)))
        return against_backend(broken_ending(broken.kind))
    except ClientTooSlow as slow:
        ended.error = "client_too_slow"
        log.warning("client too slow backend=%s: %s", opened.route.backend, slow)
        request.app[METRICS].stream_errors.labels(opened.route.backend, "client_too_slow").inc()
        writer.abort()
        return FailureKind.CANCELLED
    except _CLIENT_GONE:
        return FailureKind.CANCELLED
    finally:
        safety.stream_ended(writer)


def _summary_json(opened: OpenedStream) -> str:
    return orjson.dumps(opened.summary(time.perf_counter())).decode()


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _completion(request, Endpoint.CHAT)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _completion(request, Endpoint.COMPLETIONS)


async def list_models(request: web.Request) -> web.Response:
    config = request.app[RELAY].config
    data = [model_object(model) for model in config.models()]
    return web.json_response(
        {"object": "list", "data": data}, dumps=lambda o: orjson.dumps(o).decode()
    )


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "alive"})


async def readyz(request: web.Request) -> web.Response:
    relay = request.app[RELAY]
    health = relay.fleet.health()
    draining = relay.drain.not_ready
    ready = bool(health.usable) and not draining
    if not on_admin_listener(request):  # the public side learns ready or not, nothing more
        return web.json_response({"ready": ready}, status=200 if ready else 503)
    body = {
        "ready": ready,
        "draining": draining,
        "backends_usable": len(health.usable),
        "backends_total": len(relay.pool.clients),
        "backends_ejected": sorted(health.ejected_until),
        "panic": health.panic,
    }
    if STATE in request.app:  # degraded shared state is reported, but is no reason to stop
        body["state"] = request.app[STATE].health().as_dict()
    return web.json_response(body, status=200 if ready else 503)


async def metrics_endpoint(request: web.Request) -> web.Response:
    if (host_view := request.app.get(METRICS_VIEW)) is not None:  # --workers N: every worker
        page: web.Response = await host_view(request)
        return page
    payload = generate_latest(request.app[METRICS].registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", list_models)
    from gateway.doors.routes import add_door_routes  # the doors build on this module

    add_door_routes(app)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
