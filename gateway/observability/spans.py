"""One request's span tree, built once when it ends, from its :class:`RequestRecord`:

    chat <model>            SERVER  arrival -> end; GenAI and Meridian attributes
    ├── route               INTERNAL the routing decision
    ├── upstream <backend>  CLIENT  one per attempt (retries, hedges); events connected, first_token
    └── stream              INTERNAL first token -> end of the relayed stream

Attribute names follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``) where one
exists, and ``meridian.*`` for the rest (the route, the predicted TTFT and its terms). Like the
request log, no prompt or completion text, no header value, no upstream error message.

Every timestamp is already known when the tree is built, so the spans are the SDK's finished
``ReadableSpan`` values handed straight to the span processor, not live spans started and
ended through a ``Tracer``: a live span costs some 30 us of bookkeeping (locks, sampler,
attribute validation) that a span already over does not need, and a request has four or more.
The attribute values are Meridian's own strings and numbers, valid by construction.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.span import TraceFlags, TraceState

from gateway.observability.record import Outcome, RequestRecord, lifecycle_fields

if TYPE_CHECKING:
    from gateway.chain.hop import HopContext
    from gateway.observability.tracing import Tracing
    from gateway.opened_stream import OpenedStream

# gen_ai.operation.name per door endpoint (the GenAI conventions' well-known values).
_OPERATION = {
    "chat": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
    "responses": "chat",
    "messages": "chat",
}


_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)


def _state(hop: HopContext) -> TraceState:
    tracestate = hop.trace.tracestate
    return TraceState.from_header([tracestate]) if tracestate else TraceState()


def _parent(hop: HopContext, state: TraceState) -> SpanContext | None:
    """The caller's span (remote), or None when this hop started the trace."""
    ctx = hop.trace
    if ctx.parent_id is None:
        return None
    return SpanContext(
        int(ctx.trace_id, 16),
        int(ctx.parent_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(ctx.flags, 16)),
        trace_state=state,
    )


def _error(error: str | None) -> Status:
    return Status(StatusCode.ERROR, error) if error is not None else _UNSET


def _server_attributes(record: RequestRecord) -> dict[str, Any]:
    inbound = record.inbound
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": _OPERATION.get(inbound.endpoint.value, inbound.endpoint.value),
        "gen_ai.request.model": inbound.model,
        "meridian.request_id": inbound.request_id,
        "meridian.door": record.door,
        "meridian.tenant": inbound.tenant,
    }
    if inbound.max_tokens is not None:
        attrs["gen_ai.request.max_tokens"] = inbound.max_tokens
    if inbound.profile.origin is not None:
        attrs["meridian.origin"] = inbound.profile.origin
    if record.hop is not None and record.hop.via:  # a chained hop (the resource names us)
        attrs["meridian.hop"] = record.hop.hop_number
    if record.queue_s is not None:
        attrs["meridian.admission_queue_ms"] = round(record.queue_s * 1000.0, 3)
    for name, value in lifecycle_fields(record).items():  # where it ended, and from where
        attrs[f"meridian.{name}"] = value
    return attrs


def _opened_attributes(
    opened: OpenedStream, first: float | None, received: float
) -> dict[str, Any]:
    route = opened.route
    usage = opened.exchange.usage or {}
    attrs: dict[str, Any] = {
        "meridian.route.region": route.region,
        "meridian.route.backend": route.backend,
        "meridian.route.kind": route.kind,
        "meridian.attempts": route.attempts,
        "meridian.hedges": route.hedges,
        "gen_ai.usage.output_tokens": opened.exchange.output_tokens(),
    }
    if isinstance(usage.get("prompt_tokens"), int):
        attrs["gen_ai.usage.input_tokens"] = usage["prompt_tokens"]
    cached = opened.exchange.cached_tokens()
    if cached is not None:
        attrs["meridian.cached_tokens"] = cached
    if first is not None:
        attrs["gen_ai.server.time_to_first_token"] = round(first - received, 6)
    if route.predicted_ttft_ms is not None:
        attrs["meridian.predicted_ttft_ms"] = round(route.predicted_ttft_ms, 3)
        for term, value in opened.predicted_terms_ms.items():
            if value:  # the terms that contributed
                attrs[f"meridian.predicted_ttft.{term}_ms"] = round(value, 3)
    return attrs


class _Tree:
    """The spans of one request, sharing its trace id, state and the server span as parent."""

    __slots__ = ("server", "state", "trace_id", "tracing")

    def __init__(self, tracing: Tracing, hop: HopContext) -> None:
        self.tracing = tracing
        self.state = _state(hop)
        self.trace_id = int(hop.trace.trace_id, 16)
        self.server = SpanContext(
            self.trace_id, int(hop.trace.span_id, 16), False, _SAMPLED, self.state
        )

    def child(
        self,
        name: str,
        kind: SpanKind,
        attrs: dict[str, Any],
        start: float,
        end: float,
        events: tuple[Event, ...] = (),
        status: Status = _UNSET,
    ) -> None:
        context = SpanContext(
            self.trace_id, random.getrandbits(64) or 1, False, _SAMPLED, self.state
        )
        self.emit(name, context, self.server, kind, attrs, start, end, events, status)

    def emit(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attrs: dict[str, Any],
        start: float,
        end: float,
        events: tuple[Event, ...] = (),
        status: Status = _UNSET,
    ) -> None:
        tracing = self.tracing
        processor = tracing.processor
        if processor is None:  # _tree() builds no tree without one: nothing to emit
            return
        span = ReadableSpan(
            name,
            context=context,
            parent=parent,
            resource=tracing.resource,
            attributes=attrs,
            events=events,
            kind=kind,
            status=status,
            start_time=tracing.epoch_ns(start),
            end_time=tracing.epoch_ns(max(start, end)),
            instrumentation_scope=tracing.scope,
        )
        processor.on_end(span)


class SpanTree:
    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    def _tree(self, record: RequestRecord) -> _Tree | None:
        hop = record.hop
        if self.tracing.processor is None or hop is None or not hop.trace.sampled:
            return None  # tracing off, refused before a hop, or not sampled (ParentBased)
        return _Tree(self.tracing, hop)

    def opened(
        self,
        record: RequestRecord,
        opened: OpenedStream,
        now: float,
        outcome: Outcome,
        error: str | None,
    ) -> None:
        tree = self._tree(record)
        if tree is None:
            return
        first = opened.exchange.stats.first_token_at if record.inbound.stream else None
        attrs = _server_attributes(record)
        attrs.update(_opened_attributes(opened, first, record.inbound.received_at))
        status = 499 if outcome is Outcome.CANCELLED else 200
        self._route(tree, record)
        self._attempts(tree, record, first if first is not None else now, opened)
        if first is not None:
            self._stream(tree, opened, first, now, outcome, error)
        self._server(tree, record, attrs, now, status, outcome, error)

    def failed(self, record: RequestRecord, status: int, error: str, outcome: Outcome) -> None:
        tree = self._tree(record)
        if tree is None:
            return
        now = time.perf_counter()
        self._route(tree, record)
        self._attempts(tree, record, now, None)
        self._server(tree, record, _server_attributes(record), now, status, outcome, error)

    def _server(
        self,
        tree: _Tree,
        record: RequestRecord,
        attrs: dict[str, Any],
        now: float,
        status: int,
        outcome: Outcome,
        error: str | None,
    ) -> None:
        hop = record.hop
        if hop is None:  # _tree() builds no tree without one: nothing to emit
            return
        attrs["http.response.status_code"] = status
        attrs["meridian.outcome"] = outcome.value
        if error is not None:
            attrs["error.type"] = error
        tree.emit(
            f"{attrs['gen_ai.operation.name']} {record.inbound.model}",
            tree.server,
            _parent(hop, tree.state),
            SpanKind.SERVER,
            attrs,
            record.inbound.received_at,
            now,
            status=_error(error) if outcome is Outcome.FAILED else _UNSET,
        )

    def _route(self, tree: _Tree, record: RequestRecord) -> None:
        if record.route_started is None or record.route_ms is None:
            return
        attrs: dict[str, Any] = {}
        if record.walk is not None:
            decision = record.walk.decision
            attrs = {
                "meridian.routing.policy": decision.policy,
                "meridian.routing.candidates": len(decision.ranked),
                "meridian.routing.rejected": len(decision.rejected),
                "meridian.routing.explored": decision.explored,
            }
        start = record.route_started
        tree.child("route", SpanKind.INTERNAL, attrs, start, start + record.route_ms / 1000.0)

    def _attempts(
        self, tree: _Tree, record: RequestRecord, walk_end: float, opened: OpenedStream | None
    ) -> None:
        """One CLIENT span per attempt. A failed attempt's end is not recorded; it is taken as
        the next attempt's start (a retry follows at once) or the walk's end."""
        walk = record.walk
        if walk is None:
            return
        records = walk.records
        for index, (attempt, rec) in enumerate(zip(record.attempts(), records, strict=True)):
            number = index + 1
            won = number == record.winner
            later = [r.started_at for r in records[number:] if not r.hedge]
            end = walk_end if won or attempt["hedge"] or not later else later[0]
            outcome = attempt["outcome"]
            attrs: dict[str, Any] = {
                "gen_ai.request.model": record.inbound.model,
                "meridian.attempt.number": number,
                "meridian.attempt.backend": rec.backend,
                "meridian.attempt.hedge": rec.hedge,
                "meridian.attempt.outcome": outcome,
            }
            events: tuple[Event, ...] = ()
            status = _UNSET
            if won and opened is not None:
                events = self._first_token(attrs, opened, rec.started_at)
            elif outcome != "cancelled":
                attrs["error.type"] = outcome
                status = _error(outcome)
            name = f"upstream {rec.backend}"
            tree.child(name, SpanKind.CLIENT, attrs, rec.started_at, end, events, status)

    def _first_token(
        self, attrs: dict[str, Any], opened: OpenedStream, started: float
    ) -> tuple[Event, ...]:
        """The winning attempt's connect and first-token moments, as events and durations."""
        events = []
        connect = next((e.dur_ms for e in opened.entries if e.name == "upstream_connect"), None)
        if connect is not None:
            attrs["meridian.upstream_connect_ms"] = round(connect, 3)
            events.append(Event("connected", None, self.tracing.epoch_ns(started + connect / 1e3)))
        if opened.upstream_ttfb_ms is not None:
            ttfb = opened.upstream_ttfb_ms
            attrs["meridian.upstream_ttfb_ms"] = round(ttfb, 3)
            if opened.upstream_read_lag_ms:  # it then waited unread for a busy loop
                attrs["meridian.upstream_read_lag_ms"] = round(opened.upstream_read_lag_ms, 3)
            events.append(Event("first_token", None, self.tracing.epoch_ns(started + ttfb / 1e3)))
        return tuple(events)

    def _stream(
        self,
        tree: _Tree,
        opened: OpenedStream,
        first: float,
        now: float,
        outcome: Outcome,
        error: str | None,
    ) -> None:
        p50, p99, _ = opened.exchange.stats.itl_percentiles()
        attrs: dict[str, Any] = {"gen_ai.usage.output_tokens": opened.exchange.output_tokens()}
        if p50 is not None and p99 is not None:
            attrs["meridian.itl_p50_ms"] = round(p50, 3)
            attrs["meridian.itl_p99_ms"] = round(p99, 3)
        status = _UNSET
        if outcome is Outcome.FAILED and error is not None:
            attrs["error.type"] = error
            status = _error(error)
        tree.child("stream", SpanKind.INTERNAL, attrs, first, now, status=status)
