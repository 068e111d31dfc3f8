"""Walk the routing decision until one upstream produces a first token.

Before the first token nothing has been sent to the client, so any failure — refused, reset,
timed out, 429, 5xx, an error event, an empty stream — moves on to the next ranked candidate,
within the attempt limit and the request's deadline. Client errors the backend reports (400,
413, 422) are the client's to fix and go back unchanged. If every attempt fails, the client gets
one honest error status, never a 200 with an empty stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import aiohttp
import orjson

from gateway.config import GatewayConfig
from gateway.errors import ApiError, no_backend, upstream_failed
from gateway.fleet import FleetView
from gateway.inbound import InboundRequest
from gateway.metrics import GatewayMetrics
from gateway.signals.outlier import FailureKind
from gateway.sse import SseEvent, SseSplitter
from gateway.stream import OpenedStream, RouteInfo, event_carries_output
from gateway.timing import StreamStats, TimingEntry, label_hop, parse
from gateway.upstream import ConnectionTiming, UpstreamPool
from routing.types import Candidate, Observation, PolicyRouter

log = logging.getLogger("meridian.relay")

_CLIENT_ERROR_STATUSES = frozenset({400, 413, 422})
_MAX_ERROR_BODY = 64 * 1024


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    backend: str
    kind: str  # connect | timeout | status | error_event | empty
    message: str
    status: int | None = None
    retry_after_s: float | None = None

    def outlier_kind(self) -> FailureKind:
        """How outlier detection counts it: 429 is back-pressure, not a fault."""
        if self.kind == "connect":
            return FailureKind.CONNECT_ERROR
        if self.kind == "timeout":
            return FailureKind.TIMEOUT
        if self.status == 429:
            return FailureKind.CLIENT_ERROR
        return FailureKind.SERVER_ERROR


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _error_message(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
        message = obj["error"]["message"] if isinstance(obj.get("error"), dict) else obj["message"]
        return str(message)[:500]
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return body[:200].decode(errors="replace")


class Relay:
    def __init__(
        self,
        config: GatewayConfig,
        pool: UpstreamPool,
        router: PolicyRouter,
        fleet: FleetView,
        metrics: GatewayMetrics,
    ) -> None:
        self.config = config
        self.pool = pool
        self.router = router
        self.fleet = fleet
        self.metrics = metrics
        self._specs = {b.name: b.spec() for b in config.backends}
        self.known_models = frozenset(config.models())

    async def open(self, inbound: InboundRequest, forward_headers: dict[str, str]) -> OpenedStream:
        started = time.perf_counter()
        decision = self.router.decide(inbound.profile, self.fleet.snapshot(), time.monotonic())
        route_ms = (time.perf_counter() - started) * 1000.0
        self.metrics.route_decision.observe(route_ms / 1000.0)
        if not decision.ranked:
            reasons = "; ".join(f"{r.backend}: {r.reason}" for r in decision.rejected)
            raise no_backend(f"no backend can serve model '{inbound.model}' now ({reasons})", 1)

        limits, timeouts = self.config.limits, self.config.timeouts
        deadline = inbound.received_at + timeouts.total_s
        failures: list[AttemptFailure] = []
        upstream_wait_ms = 0.0
        for attempt, candidate in enumerate(decision.ranked[: limits.max_attempts], start=1):
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                break
            if attempt > 1:  # decide() counted only its first choice as in flight
                self.router.reserve(candidate.backend, time.monotonic())
            sent_at = time.perf_counter()
            result = await self._attempt(
                inbound, candidate, attempt, forward_headers, min(timeouts.first_token_s, remaining)
            )
            upstream_wait_ms += (time.perf_counter() - sent_at) * 1000.0
            if isinstance(result, AttemptFailure):
                failures.append(result)
                log.info(
                    "attempt failed request_id=%s backend=%s kind=%s status=%s",
                    inbound.request_id,
                    result.backend,
                    result.kind,
                    result.status,
                )
                continue
            now = time.perf_counter()
            gw_ms = max(0.0, (now - inbound.received_at) * 1000.0 - upstream_wait_ms)
            ttft_ms = (now - inbound.received_at) * 1000.0
            result.entries[:0] = [
                TimingEntry("gw", gw_ms),
                TimingEntry("route", route_ms, decision.policy),
            ]
            result.entries.insert(4, TimingEntry("ttft", ttft_ms))
            result.deadline = deadline
            self.metrics.overhead.observe(gw_ms / 1000.0)
            self.metrics.ttft.labels(candidate.backend).observe(ttft_ms / 1000.0)
            if candidate.predicted_ttft_ms:
                error = (ttft_ms - candidate.predicted_ttft_ms) / candidate.predicted_ttft_ms
                self.metrics.prediction_error.labels(candidate.backend).observe(error)
            return result
        raise self._final_error(failures, inbound)

    def _final_error(self, failures: list[AttemptFailure], inbound: InboundRequest) -> ApiError:
        if not failures:
            return ApiError(
                504,
                "request deadline passed before any backend answered",
                "server_error",
                "deadline_exceeded",
            )
        summary = "; ".join(f"{f.backend}: {f.kind} ({f.message})" for f in failures)
        message = f"all {len(failures)} attempts for model '{inbound.model}' failed: {summary}"
        retry_afters = [f.retry_after_s for f in failures if f.retry_after_s is not None]
        retry_after = min(retry_afters) if retry_afters else None
        if all(f.status == 429 for f in failures):
            return upstream_failed(message, 429, retry_after or 1.0)
        if all(f.kind == "timeout" for f in failures):
            return ApiError(504, message, "server_error", "upstream_timeout")
        if all(f.kind == "connect" or f.status == 503 for f in failures):
            return no_backend(message, retry_after or 1.0)
        return upstream_failed(message, 502, retry_after)

    async def _attempt(
        self,
        inbound: InboundRequest,
        candidate: Candidate,
        attempt: int,
        forward_headers: dict[str, str],
        first_token_timeout_s: float,
    ) -> OpenedStream | AttemptFailure:
        name = candidate.backend
        client = self.pool[name]
        spec = self._specs[name]
        timing = ConnectionTiming()
        stats = StreamStats(started_at=inbound.received_at)
        sent_at = time.perf_counter()
        self.fleet.on_request_start(name)
        self.metrics.in_flight.labels(name).inc()
        response: aiohttp.ClientResponse | None = None
        opened: OpenedStream | None = None
        try:
            async with asyncio.timeout(first_token_timeout_s):
                response = await client.post(
                    inbound.endpoint.path, inbound.body, forward_headers, timing
                )
                if response.status != 200:
                    return await self._status_failure(name, response)
                route = RouteInfo(
                    name, spec.region, spec.kind.value, attempt, candidate.predicted_ttft_ms
                )
                opened = OpenedStream(
                    spec,
                    route,
                    response,
                    stats,
                    [],
                    inter_token_s=self.config.timeouts.inter_token_s,
                )
                failure = await self._read_first(opened, inbound.stream)
                if failure is not None:
                    return failure
        except TimeoutError:
            message = f"no first token within {first_token_timeout_s:.1f}s"
            return self._failed(AttemptFailure(name, "timeout", message), response)
        except (aiohttp.ClientError, OSError) as exc:
            return self._failed(AttemptFailure(name, "connect", repr(exc)), response)
        except ApiError:  # the backend says the request itself is bad
            self.router.release(name)
            self._release(name, response, FailureKind.CLIENT_ERROR)
            raise
        except BaseException:  # cancelled: the client went away
            self.router.release(name)
            self._release(name, response, FailureKind.CANCELLED)
            raise
        first_at = time.perf_counter()
        opened.upstream_ttfb_ms = (first_at - sent_at) * 1000.0
        opened.predicted_terms_ms = candidate.terms_ms
        upstream_hop = parse(response.headers.get("Server-Timing", ""))
        opened.entries.extend(
            [
                TimingEntry("upstream_connect", timing.connect_ms),
                TimingEntry("upstream_ttfb", opened.upstream_ttfb_ms),
                *label_hop(upstream_hop, name),
            ]
        )
        self.metrics.upstream_attempts.labels(name, "ok").inc()
        return opened

    async def _read_first(self, opened: OpenedStream, stream: bool) -> AttemptFailure | None:
        """Read until the first token (streaming) or the whole body; None when it came."""
        name = opened.route.backend
        if not stream:
            opened.body = await opened.response.read()
            opened.stats.on_token_event(time.perf_counter())
            return None
        splitter = SseSplitter()
        opened.splitter = splitter
        while True:
            chunk = await opened.response.content.readany()
            events: list[SseEvent] = splitter.feed(chunk) if chunk else splitter.flush()
            for event in events:
                carries, obj = event_carries_output(event)
                if obj is not None and "error" in obj and not opened.first_events:
                    message = _error_message(event.data or b"")
                    failure = AttemptFailure(name, "error_event", message)
                    return self._failed(failure, opened.response)
                opened.note(event, obj, carries)
                opened.first_events.append(event)
            if opened.stats.first_token_at is not None or opened.saw_done:
                return None
            if not chunk:
                failure = AttemptFailure(name, "empty", "stream ended before the first token")
                return self._failed(failure, opened.response)

    async def _status_failure(self, name: str, response: aiohttp.ClientResponse) -> AttemptFailure:
        body = await response.content.read(_MAX_ERROR_BODY)
        message = _error_message(body)
        if response.status in _CLIENT_ERROR_STATUSES:
            raise ApiError(response.status, message, "invalid_request_error", "upstream_rejected")
        failure = AttemptFailure(
            name,
            "status",
            f"HTTP {response.status}: {message}",
            response.status,
            _retry_after(response),
        )
        return self._failed(failure, response)

    def _failed(
        self, failure: AttemptFailure, response: aiohttp.ClientResponse | None
    ) -> AttemptFailure:
        name = failure.backend
        self.metrics.upstream_attempts.labels(name, failure.kind).inc()
        self._release(name, response, failure.outlier_kind())
        self.router.observe(
            Observation(backend=name, at=time.monotonic(), ok=False, error_kind=failure.kind)
        )
        return failure

    def _release(
        self, name: str, response: aiohttp.ClientResponse | None, failure: FailureKind | None
    ) -> None:
        if response is not None:
            response.close()
        self.metrics.in_flight.labels(name).dec()
        self.fleet.on_request_end(name, failure is None, failure)

    def finish(
        self,
        inbound: InboundRequest,
        opened: OpenedStream,
        now: float,
        failure: FailureKind | None = None,
    ) -> None:
        """Book-keeping once the client's response is over, or abandoned (``failure``)."""
        opened.close()
        name = opened.route.backend
        self.metrics.in_flight.labels(name).dec()
        self.fleet.on_request_end(name, failure is None, failure)
        stats = opened.stats
        tokens = opened.output_tokens()
        self.metrics.output_tokens.labels(name).inc(tokens)
        self.metrics.e2e.labels(name).observe(now - inbound.received_at)
        itl_hist = self.metrics.itl.labels(name)
        for gap in stats.gaps_ms:
            itl_hist.observe(gap / 1000.0)
        if failure is FailureKind.CANCELLED:
            self.router.release(name)  # an abandoned request says nothing about the backend
            return
        mean_itl = sum(stats.gaps_ms) / len(stats.gaps_ms) if stats.gaps_ms else None
        self.router.observe(
            Observation(
                backend=name,
                at=time.monotonic(),
                ok=failure is None,
                prompt_tokens=inbound.profile.prompt_tokens,
                cached_tokens=opened.cached_tokens(),
                output_tokens=tokens,
                ttft_ms=opened.upstream_ttfb_ms,
                itl_ms=mean_itl,
                predicted_ttft_ms=opened.route.predicted_ttft_ms,
                predicted_terms_ms=opened.predicted_terms_ms,
                prefix_hashes=inbound.profile.prefix_hashes,
                tenant=inbound.tenant,
                error_kind=None if failure is None else failure.value,
            )
        )
