"""W3C Trace Context (``traceparent``): keep the trace id, give each hop its own span id.

A gateway is one span of the request's trace: the incoming ``traceparent`` names the caller's
span (our parent); we forward a ``traceparent`` with the same trace id and our own span id, so
the next hop's parent is us. A missing or malformed header starts a new trace (the spec's rule:
never propagate what cannot be parsed), and ``tracestate`` travels only with a valid parent.

Parsing is OpenTelemetry's own propagator (``TraceContextTextMapPropagator``) and ids are drawn
as its SDK's generator draws them, so this hop agrees with every other OpenTelemetry service on
what a valid header is; the span this context names is the server span of
:mod:`gateway.observability.tracing` when tracing is on.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
_random_bits = random.getrandbits  # what the SDK's RandomIdGenerator draws ids from
_UNSAMPLED = "00"


@dataclass(frozen=True, slots=True)
class TraceContext:
    """This hop's place in the trace."""

    trace_id: str
    span_id: str  # this hop's span
    parent_id: str | None  # the caller's span; None when this hop started the trace
    flags: str
    tracestate: str | None = None

    def traceparent(self) -> str:
        """What the next hop receives: same trace, this hop as the parent."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    @property
    def sampled(self) -> bool:
        return bool(int(self.flags, 16) & 0x01)


@dataclass(frozen=True, slots=True)
class ParentSpan:
    trace_id: str
    span_id: str
    flags: str
    tracestate: str | None = None


def parse_traceparent(value: str | None, tracestate: str | None = None) -> ParentSpan | None:
    """The caller's span, or None when the header is absent or not valid W3C."""
    if not value:
        return None
    carrier = {"traceparent": value}
    if tracestate:
        carrier["tracestate"] = tracestate
    context = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    if not context.is_valid:
        return None
    state = context.trace_state.to_header() if tracestate else None
    return ParentSpan(
        trace.format_trace_id(context.trace_id),
        trace.format_span_id(context.span_id),
        f"{int(context.trace_flags):02x}",
        state or None,
    )


def random_hex(nbytes: int) -> str:
    """A random trace (16 bytes) or span (8 bytes) id, never all zeros: what the SDK's
    ``RandomIdGenerator`` and ``format_trace_id`` / ``format_span_id`` give, without their
    four Python calls on every request's path."""
    value = _random_bits(nbytes * 8)
    while not value:  # all zeros is W3C's invalid id
        value = _random_bits(nbytes * 8)
    return f"{value:0{nbytes * 2}x}"


def child_span(
    traceparent: str | None,
    tracestate: str | None = None,
    new_id: Callable[[int], str] = random_hex,
) -> TraceContext:
    """This hop's span under ``traceparent``, or the root of a new trace."""
    parent = parse_traceparent(traceparent, tracestate)
    if parent is None:
        return TraceContext(new_id(16), new_id(8), None, _UNSAMPLED)
    return TraceContext(parent.trace_id, new_id(8), parent.span_id, parent.flags, parent.tracestate)
