"""The gRPC door on the gateway's own relay: same parsing, routing, fallback and timing as HTTP.

A thin door over the door-neutral seam object (:class:`gateway.lifecycle.call.CoreCall`), the
same one every HTTP door (:mod:`gateway.doors.sse_door`) uses: accept the body as an HTTP
request would be, let the relay walk the ranked candidates until one produces a first token,
then stream the call's parsed view; the core classifies the ending and counts it, as for HTTP. The route and
this hop's ``server-timing`` entries become initial metadata at that moment (like the HTTP
response headers); the end-of-stream summary (the HTTP ``meridian-timing`` comment line) becomes
trailing metadata, on success and on a mid-stream failure alike.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import orjson

from gateway.errors import ApiError
from gateway.grpc.door_chunks import UpstreamErrorEvent, door_chunks
from gateway.inbound import Endpoint, request_id_from, tenant_from
from gateway.lifecycle.call import CoreCall
from gateway.lifecycle.core import Arrival
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
from gateway.opened_stream import OpenedStream
from gateway.relay import Relay
from gateway.stream import StreamBroken
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

    def __init__(self, relay: Relay, metrics: GatewayMetrics) -> None:
        self.relay = relay
        self.metrics = metrics

    async def list_models(self) -> Sequence[ModelEntry]:
        # The relay's current configuration, as the HTTP door's /v1/models: a reload shows.
        return [ModelEntry(model) for model in self.relay.config.models()]

    def call(self, request: BackendRequest) -> CoreCall:
        """The seam object for ``request``: the same :class:`CoreCall` the HTTP door uses."""
        arrival = Arrival(
            "grpc",
            Endpoint(request.kind.value),
            request.body,
            request_id_from(request.request_id),
            tenant_from(request.tenant),
            request.received_at,
            peer=request.peer,
            forwarded_for=request.forwarded_for or None,
            timeout_s=request.timeout_s,
            key_id=request.key_id,
            forward=dict(request.forward_metadata),
        )
        return CoreCall(self.relay, arrival)

    async def stream(self, request: BackendRequest) -> AsyncGenerator[BackendEvent, None]:
        call = self.call(request)
        try:
            try:
                opened = await call.open()  # a refusal is counted and logged by the call
            except ApiError as error:
                yield _failed(error)
                return
            # Until told otherwise the client went away (the generator closed or was cancelled).
            exchange, inbound = call.exchange, call.exchange.inbound
            initial = [
                (ROUTE_KEY, opened.route.header()),
                (TIMING_KEY, render(opened.entries)),
                ("x-request-id", inbound.request_id),
            ]
            if opened.hop is not None:  # this hop's span (W3C traceresponse), as over HTTP
                initial.append(("traceresponse", opened.hop.trace.traceparent()))
            yield StreamOpened(tuple(initial))
            async for data in door_chunks(inbound, opened, call):  # per API
                yield StreamChunk(data)
            exchange.completed()
            yield StreamEnded(summary_metadata(opened.summary(time.perf_counter())))
        except UpstreamErrorEvent as event:
            call.exchange.ended_by("upstream_error_event")
            yield self._error_event(event.data, call.opened)
        except StreamBroken as broken:
            # Drained, past its deadline or the gateway's own fault: not the backend's
            # (decided in gateway/lifecycle/outcome.py, by the core, as on the HTTP door).
            call.exchange.broke(broken)
            summary = call.opened.summary(time.perf_counter())
            yield _failed(broken.error, summary_metadata(summary))
        finally:
            call.close()

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
