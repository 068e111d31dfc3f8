"""One request's span tree, built once when it ends, from its :class:`RequestRecord`:

    chat <model>            SERVER  arrival -> end; GenAI and Meridian attributes
    ├── route               INTERNAL the routing decision
    ├── upstream <backend>  CLIENT  one per attempt (retries, hedges); events connected, first_token
    └── stream              INTERNAL first token -> end of the relayed stream

Attribute names follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``) where one
exists, and ``meridian.*`` for the rest (the route, the predicted TTFT and its terms). Like the
request log, no prompt or completion text, no header value, no upstream error message.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.span import TraceFlags, TraceState

from gateway.observability.record import Outcome, RequestRecord

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from gateway.chain.hop import HopContext
    from gateway.observability.tracing import Tracing
    from gateway.stream import OpenedStream

# gen_ai.operation.name per door endpoint (the GenAI conventions' well-known values).
_OPERATION = {
    "chat": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
    "responses": "chat",
    "messages": "chat",
}


def _parent_context(hop: HopContext) -> Context | None:
    """The caller's span (remote), or None when this hop started the trace."""
    ctx = hop.trace
    if ctx.parent_id is None:
        return None
    state = TraceState.from_header([ctx.tracestate]) if ctx.tracestate else TraceState()
    parent = SpanContext(
        trace_id=int(ctx.trace_id, 16),
        span_id=int(ctx.parent_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(ctx.flags, 16)),
        trace_state=state,
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def _server_attributes(record: RequestRecord) -> dict[str, Any]:
    inbound = record.inbound
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": _OPERATION.get(inbound.endpoint.value, inbound.endpoint.value),
        "gen_ai.request.model": inbound.model,
        "meridian.request_id": inbound.request_id,
        "meridian.door": record.door,
        "meridian.tenant": inbound.tenant,
        "meridian.stream": inbound.stream,
    }
    if inbound.max_tokens is not None:
        attrs["gen_ai.request.max_tokens"] = inbound.max_tokens
    if inbound.profile.origin is not None:
        attrs["meridian.origin"] = inbound.profile.origin
    if record.hop is not None:
        attrs["meridian.gateway"] = record.hop.gateway_id
        attrs["meridian.hop"] = record.hop.hop_number
    if record.queue_s is not None:
        attrs["meridian.admission_queue_ms"] = round(record.queue_s * 1000.0, 3)
    return attrs


def _opened_attributes(
    opened: OpenedStream, first: float | None, received: float
) -> dict[str, Any]:
    route = opened.route
    usage = opened.usage or {}
    attrs: dict[str, Any] = {
        "meridian.route.region": route.region,
        "meridian.route.backend": route.backend,
        "meridian.route.kind": route.kind,
        "meridian.attempts": route.attempts,
        "meridian.hedges": route.hedges,
        "gen_ai.usage.output_tokens": opened.output_tokens(),
    }
    if isinstance(usage.get("prompt_tokens"), int):
        attrs["gen_ai.usage.input_tokens"] = usage["prompt_tokens"]
    cached = opened.cached_tokens()
    if cached is not None:
        attrs["meridian.cached_tokens"] = cached
    if first is not None:
        attrs["gen_ai.server.time_to_first_token"] = round(first - received, 6)
    if route.predicted_ttft_ms is not None:
        attrs["meridian.predicted_ttft_ms"] = round(route.predicted_ttft_ms, 3)
        for term, value in opened.predicted_terms_ms.items():
            attrs[f"meridian.predicted_ttft.{term}_ms"] = round(value, 3)
    return attrs


class SpanTree:
    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    def opened(
        self,
        record: RequestRecord,
        opened: OpenedStream,
        now: float,
        outcome: Outcome,
        error: str | None,
    ) -> None:
        first = opened.stats.first_token_at if record.inbound.stream else None
        attrs = _server_attributes(record)
        attrs.update(_opened_attributes(opened, first, record.inbound.received_at))
        status = 499 if outcome is Outcome.CANCELLED else 200
        server = self._server(record, attrs, status, outcome, error)
        if server is None:
            return
        parent = trace.set_span_in_context(server)
        winner_end = first if first is not None else now
        self._route(record, parent)
        self._attempts(record, parent, winner_end, opened)
        if first is not None:
            self._stream(opened, parent, first, now, outcome, error)
        server.end(self.tracing.epoch_ns(now))

    def failed(self, record: RequestRecord, status: int, error: str, outcome: Outcome) -> None:
        now = time.perf_counter()
        server = self._server(record, _server_attributes(record), status, outcome, error)
        if server is None:
            return
        parent = trace.set_span_in_context(server)
        self._route(record, parent)
        self._attempts(record, parent, now, None)
        server.end(self.tracing.epoch_ns(now))

    def _server(
        self,
        record: RequestRecord,
        attrs: dict[str, Any],
        status: int,
        outcome: Outcome,
        error: str | None,
    ) -> trace.Span | None:
        tracer, hop = self.tracing.tracer, record.hop
        if tracer is None or hop is None:
            return None
        attrs["http.response.status_code"] = status
        attrs["meridian.outcome"] = outcome.value
        if error is not None:
            attrs["error.type"] = error
        ids = self.tracing.ids
        ids.next_trace_id = int(hop.trace.trace_id, 16)  # used only when there is no parent
        ids.next_span_id = int(hop.trace.span_id, 16)
        span = tracer.start_span(
            f"{attrs['gen_ai.operation.name']} {record.inbound.model}",
            context=_parent_context(hop),
            kind=SpanKind.SERVER,
            attributes=attrs,
            start_time=self.tracing.epoch_ns(record.inbound.received_at),
        )
        ids.next_trace_id = ids.next_span_id = None
        if outcome is Outcome.FAILED:
            span.set_status(Status(StatusCode.ERROR, error))
        return span

    def _route(self, record: RequestRecord, parent: Context) -> None:
        if record.route_started is None or record.route_ms is None or self.tracing.tracer is None:
            return
        attrs: dict[str, Any] = {}
        if record.walk is not None:
            decision = record.walk.decision
            attrs = {
                "meridian.routing.policy": decision.policy,
                "meridian.routing.candidates": len(decision.ranked),
                "meridian.routing.rejected": len(decision.rejected),
            }
        start = record.route_started
        span = self.tracing.tracer.start_span(
            "route", context=parent, attributes=attrs, start_time=self.tracing.epoch_ns(start)
        )
        span.end(self.tracing.epoch_ns(start + record.route_ms / 1000.0))

    def _attempts(
        self, record: RequestRecord, parent: Context, walk_end: float, opened: OpenedStream | None
    ) -> None:
        """One CLIENT span per attempt. A failed attempt's end is not recorded; it is taken as
        the next attempt's start (a retry follows at once) or the walk's end."""
        walk, tracer = record.walk, self.tracing.tracer
        if walk is None or tracer is None:
            return
        records = walk.records
        for index, (attempt, rec) in enumerate(zip(record.attempts(), records, strict=True)):
            number = index + 1
            won = number == record.winner
            later = [r.started_at for r in records[number:] if not r.hedge]
            end = walk_end if won or attempt["hedge"] or not later else later[0]
            attrs: dict[str, Any] = {
                "gen_ai.request.model": record.inbound.model,
                "meridian.attempt.number": number,
                "meridian.attempt.backend": rec.backend,
                "meridian.attempt.hedge": rec.hedge,
                "meridian.attempt.outcome": attempt["outcome"],
            }
            span = tracer.start_span(
                f"upstream {rec.backend}",
                context=parent,
                kind=SpanKind.CLIENT,
                attributes=attrs,
                start_time=self.tracing.epoch_ns(rec.started_at),
            )
            if won and opened is not None:
                self._first_token_events(span, opened, rec.started_at)
            elif attempt["outcome"] != "cancelled":
                span.set_attribute("error.type", attempt["outcome"])
                span.set_status(Status(StatusCode.ERROR, attempt["outcome"]))
            span.end(self.tracing.epoch_ns(max(end, rec.started_at)))

    def _first_token_events(self, span: trace.Span, opened: OpenedStream, started: float) -> None:
        connect = next((e.dur_ms for e in opened.entries if e.name == "upstream_connect"), None)
        if connect is not None:
            span.set_attribute("meridian.upstream_connect_ms", round(connect, 3))
            span.add_event("connected", timestamp=self.tracing.epoch_ns(started + connect / 1e3))
        if opened.upstream_ttfb_ms is not None:
            ttfb = opened.upstream_ttfb_ms
            span.set_attribute("meridian.upstream_ttfb_ms", round(ttfb, 3))
            span.add_event("first_token", timestamp=self.tracing.epoch_ns(started + ttfb / 1e3))

    def _stream(
        self,
        opened: OpenedStream,
        parent: Context,
        first: float,
        now: float,
        outcome: Outcome,
        error: str | None,
    ) -> None:
        assert self.tracing.tracer is not None
        p50, p99, _ = opened.stats.itl_percentiles()
        attrs: dict[str, Any] = {"gen_ai.usage.output_tokens": opened.output_tokens()}
        if p50 is not None and p99 is not None:
            attrs["meridian.itl_p50_ms"] = round(p50, 3)
            attrs["meridian.itl_p99_ms"] = round(p99, 3)
        span = self.tracing.tracer.start_span(
            "stream", context=parent, attributes=attrs, start_time=self.tracing.epoch_ns(first)
        )
        if outcome is Outcome.FAILED and error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(self.tracing.epoch_ns(now))
