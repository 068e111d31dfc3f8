"""The gRPC door on the gateway's own relay: same parsing, routing, fallback and timing as HTTP.

A thin door over the door-neutral core (:mod:`gateway.lifecycle.core`), like every HTTP door
(:mod:`gateway.doors.sse_door`): accept the body as an HTTP request would be, let the relay walk
the ranked candidates until one produces a first token, then stream; the core classifies the
ending and counts it, as for HTTP. The route and
this hop's ``server-timing`` entries become initial metadata at that moment (like the HTTP
response headers); the end-of-stream summary (the HTTP ``meridian-timing`` comment line) becomes
trailing metadata, on success and on a mid-stream failure alike.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import orjson

from gateway.config import GatewayConfig
from gateway.errors import ApiError
from gateway.grpc.door_chunks import UpstreamErrorEvent, door_chunks
from gateway.impossible import ImpossibleState, internal_error
from gateway.inbound import Endpoint, InboundRequest, request_id_from, tenant_from
from gateway.lifecycle.core import Arrival, Exchange, accept, forward_headers, refused
from gateway.lifecycle.seam import (
    BackendEvent,
    BackendRequest,
    Metadata,
    ModelEntry,
    StreamChunk,
    StreamEnded,
    StreamFailed,
    StreamOpened,
)
from gateway.metrics import GatewayMetrics
from gateway.relay import Relay
from gateway.stream import OpenedStream, StreamBroken
from gateway.timing import TimingEntry, render

ROUTE_KEY = "x-meridian-route"
TIMING_KEY = "server-timing"
SUMMARY_KEY = "x-meridian-timing"  # the end-of-stream summary JSON, as on the HTTP door
_SUMMARY_TIMINGS = ("ttft_ms", "itl_p50_ms", "itl_p99_ms", "itl_max_ms", "e2e_ms")


def _failed(error: ApiError, metadata: Metadata = ()) -> StreamFailed:
    return StreamFailed(error.status, error.message, error.code, error.retry_after_s, metadata)


def summary_metadata(summary: dict[str, Any]) -> Metadata:
    """Trailers: the summary as JSON plus its durations as ``server-timing`` entries."""
    entries = [
        TimingEntry(name.removesuffix("_ms"), summary[name])
        for name in _SUMMARY_TIMINGS
        if isinstance(summary.get(name), int | float)
    ]
    return ((SUMMARY_KEY, orjson.dumps(summary).decode()), (TIMING_KEY, render(entries)))


class RelayBackend:
    """An :class:`~gateway.lifecycle.seam.InferenceBackend` over the process's one :class:`Relay`."""

    def __init__(self, relay: Relay, config: GatewayConfig, metrics: GatewayMetrics) -> None:
        self.relay = relay
        self.config = config
        self.metrics = metrics

    async def list_models(self) -> Sequence[ModelEntry]:
        return [ModelEntry(model) for model in self.config.models()]

    async def _open(
        self, request: BackendRequest, endpoint: Endpoint
    ) -> tuple[Arrival, InboundRequest, OpenedStream] | StreamFailed:
        request_id = request_id_from(request.request_id)
        arrival = Arrival(
            "grpc",
            endpoint,
            request.body,
            request_id,
            tenant_from(request.tenant),
            request.received_at,
            peer=request.peer,
            forwarded_for=request.forwarded_for or None,
            timeout_s=request.timeout_s,
            key_id=request.key_id,
            forward=dict(request.forward_metadata),
        )
        inbound: InboundRequest | None = None
        try:
            inbound = accept(self.relay, arrival)
            forward = forward_headers(arrival, inbound)
            # The client's deadline bounds routing and every attempt; after the first token
            # gRPC itself enforces it by cancelling the call.
            async with asyncio.timeout(request.timeout_s):
                opened = await self.relay.open(inbound, forward, door="grpc")
        except (ApiError, ImpossibleState) as exc:
            error = exc if isinstance(exc, ApiError) else internal_error(request_id, "grpc", exc)
            refused(self.relay, "grpc", endpoint, request_id, request.received_at, inbound, error)
            return _failed(error)
        except TimeoutError:
            message = "the call's deadline passed before any backend produced a first token"
            error = ApiError(504, message, "server_error", "deadline_exceeded")
            refused(self.relay, "grpc", endpoint, request_id, request.received_at, inbound, error)
            return _failed(error)
        return arrival, inbound, opened

    async def stream(self, request: BackendRequest) -> AsyncGenerator[BackendEvent, None]:
        endpoint = Endpoint(request.kind.value)
        result = await self._open(request, endpoint)
        if isinstance(result, StreamFailed):
            yield result
            return
        arrival, inbound, opened = result
        # Until told otherwise the client went away (the generator closed or was cancelled).
        exchange = Exchange(self.relay, arrival, inbound, opened)
        try:
            initial = [
                (ROUTE_KEY, opened.route.header()),
                (TIMING_KEY, render(opened.entries)),
                ("x-request-id", inbound.request_id),
            ]
            if opened.hop is not None:  # this hop's span (W3C traceresponse), as over HTTP
                initial.append(("traceresponse", opened.hop.trace.traceparent()))
            yield StreamOpened(tuple(initial))
            async for data in door_chunks(inbound, opened):  # per API: gateway/grpc/door_chunks
                yield StreamChunk(data)
            exchange.completed()
            yield StreamEnded(summary_metadata(opened.summary(time.perf_counter())))
        except UpstreamErrorEvent as event:
            exchange.ended_by("upstream_error_event")
            yield self._error_event(event.data, opened)
        except StreamBroken as broken:
            # Drained, past its deadline or the gateway's own fault: not the backend's
            # (decided in gateway/lifecycle/outcome.py, by the core, as on the HTTP door).
            exchange.broke(broken)
            yield _failed(broken.error, summary_metadata(opened.summary(time.perf_counter())))
        finally:
            exchange.close()

    def _error_event(self, data: dict[str, Any], opened: OpenedStream) -> StreamFailed:
        error = data.get("error")
        fields = error if isinstance(error, dict) else {}
        code = fields.get("code")
        return StreamFailed(
            502,
            "backend sent an error event mid-stream",
            code if isinstance(code, str) else "upstream_error_event",
            None,
            summary_metadata(opened.summary(time.perf_counter())),
        )
