"""The gRPC door on the gateway's own relay: same parsing, routing, fallback and timing as HTTP.

The flow mirrors ``gateway.http_api._completion``: parse the body like an HTTP request, let the
relay walk the ranked candidates until one produces a first token, then stream. The route and
this hop's ``server-timing`` entries become initial metadata at that moment (like the HTTP
response headers); the end-of-stream summary (the HTTP ``meridian-timing`` comment line) becomes
trailing metadata, on success and on a mid-stream failure alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import orjson

from gateway.config import GatewayConfig
from gateway.errors import ApiError
from gateway.grpc.backend import (
    BackendEvent,
    BackendRequest,
    Metadata,
    ModelEntry,
    StreamChunk,
    StreamEnded,
    StreamFailed,
    StreamOpened,
)
from gateway.grpc.door_chunks import UpstreamErrorEvent, door_chunks
from gateway.http_api import TENANT_HEADER
from gateway.impossible import ImpossibleState, internal_error
from gateway.inbound import Endpoint, InboundRequest, parse_inbound, request_id_from, tenant_from
from gateway.lifecycle.outcome import against_backend, broken_ending
from gateway.metrics import GatewayMetrics
from gateway.objectives import apply as apply_objective
from gateway.relay import Relay
from gateway.signals.outlier import FailureKind
from gateway.stream import OpenedStream, StreamBroken
from gateway.timing import TimingEntry, render

log = logging.getLogger("meridian.grpc")

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
    """An :class:`~gateway.grpc.backend.InferenceBackend` over the process's one :class:`Relay`."""

    def __init__(self, relay: Relay, config: GatewayConfig, metrics: GatewayMetrics) -> None:
        self.relay = relay
        self.config = config
        self.metrics = metrics

    async def list_models(self) -> Sequence[ModelEntry]:
        return [ModelEntry(model) for model in self.config.models()]

    def _count(self, endpoint: Endpoint, model: str, status: str) -> None:
        self.metrics.requests.labels("grpc", endpoint.value, model, status).inc()

    async def _open(
        self, request: BackendRequest, endpoint: Endpoint
    ) -> tuple[InboundRequest, OpenedStream] | StreamFailed:
        model = "unknown"
        inbound: InboundRequest | None = None
        request_id = request_id_from(request.request_id)
        try:
            client = self.relay.fleet.locate(request.peer, request.forwarded_for or None)
            inbound = parse_inbound(
                endpoint,
                request.body,
                request_id=request_id,
                tenant=tenant_from(request.tenant),
                origin=client.origin,
                known_models=self.relay.known_models,
                received_at=request.received_at,
            )
            inbound = apply_objective(
                inbound, self.relay.config.objectives, None, request.timeout_s
            )
            model = inbound.model
            forward = {"X-Request-Id": inbound.request_id, **dict(request.forward_metadata)}
            # The authenticated tenant (gateway/auth), believed by a chained gateway from a hop
            # key (the backend's api_key), as on the HTTP door.
            forward[TENANT_HEADER] = inbound.profile.tenant
            # The client's deadline bounds routing and every attempt; after the first token
            # gRPC itself enforces it by cancelling the call.
            async with asyncio.timeout(request.timeout_s):
                opened = await self.relay.open(inbound, forward, door="grpc")
        except ApiError as err:
            self._count(endpoint, model, str(err.status))
            if inbound is None:  # refused before the relay core saw it: the door logs it
                self.relay.observer.rejected(
                    "grpc", endpoint.value, request_id, err, request.received_at
                )
            return _failed(err)
        except ImpossibleState as exc:
            self._count(endpoint, model, "500")
            return _failed(internal_error(request_id, "grpc", exc))
        except TimeoutError:
            self._count(endpoint, model, "504")
            message = "the call's deadline passed before any backend produced a first token"
            return StreamFailed(504, message, "deadline_exceeded")
        return inbound, opened

    async def stream(self, request: BackendRequest) -> AsyncGenerator[BackendEvent, None]:
        endpoint = Endpoint(request.kind.value)
        result = await self._open(request, endpoint)
        if isinstance(result, StreamFailed):
            yield result
            return
        inbound, opened = result
        # Until proven otherwise the client went away (the generator closed or was cancelled).
        failure: FailureKind | None = FailureKind.CANCELLED
        error: str | None = None  # the kind of a stream that broke, for the request log
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
            failure = None
            yield StreamEnded(summary_metadata(opened.summary(time.perf_counter())))
        except UpstreamErrorEvent as event:
            failure, error = FailureKind.SERVER_ERROR, "upstream_error_event"
            yield self._error_event(event.data, opened)
        except StreamBroken as broken:
            error = broken.kind
            log.warning("grpc stream broke backend=%s kind=%s", opened.route.backend, broken.kind)
            self.metrics.stream_errors.labels(opened.route.backend, broken.kind).inc()
            # Drained, past its deadline or the gateway's own fault: not the backend's
            # (decided in gateway/lifecycle/outcome.py, as on the HTTP door).
            failure = against_backend(broken_ending(broken.kind))
            yield _failed(broken.error, summary_metadata(opened.summary(time.perf_counter())))
        finally:
            self.relay.finish(inbound, opened, time.perf_counter(), failure, error)
            self._count(endpoint, inbound.model, "200" if failure is None else failure.value)

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
