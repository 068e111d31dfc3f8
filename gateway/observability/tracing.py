"""OpenTelemetry tracing: a span processor and exporter per gateway, or nothing at all.

With ``tracing.exporter: none`` (the default) nothing exists and no span is ever built: the
request path only continues the caller's ``traceparent`` (gateway/chain/trace.py), which it
does anyway. With an exporter, each request's span tree is built once, when the request ends
(:mod:`gateway.observability.spans`), from what the relay core recorded — never on the way to
the first token.

Sampling is the SDK's ``ParentBased(TraceIdRatioBased(sample_ratio))`` rule, decided when the
request enters (:meth:`Tracing.enter`) so the next hop is told in its ``traceparent``: a caller's
sampled flag is followed, a trace this gateway starts is sampled by the ratio.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

import gateway
from gateway.chain.hop import TRACEPARENT
from gateway.chain.trace import TraceContext
from gateway.observability.config import TracingConfig

if TYPE_CHECKING:
    from gateway.chain.hop import HopContext

_SAMPLED = "01"


class TracingUnavailable(Exception):
    """``tracing.exporter: otlp`` without the OTLP exporter installed."""


def build_exporter(config: TracingConfig) -> SpanExporter:
    if config.exporter == "console":
        return ConsoleSpanExporter()
    try:
        # The optional 'otlp' extra: only an operator who asks for OTLP installs it.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise TracingUnavailable(
            "tracing.exporter is 'otlp' but the OTLP exporter is not installed: "
            "pip install 'meridian-gateway[otlp]'"
        ) from exc
    exporter: SpanExporter = (
        OTLPSpanExporter(endpoint=config.endpoint) if config.endpoint else OTLPSpanExporter()
    )
    return exporter


class Tracing:
    """This gateway's span processor (None: tracing off), its resource and scope, and the
    clock that turns perf_counter() into epoch nanoseconds."""

    def __init__(self, config: TracingConfig, instance: str | None = None) -> None:
        self.config = config
        self.processor: SpanProcessor | None = None
        self.resource = Resource.create(
            {
                "service.name": config.service_name,
                "service.version": gateway.__version__,
                **({"service.instance.id": instance} if instance else {}),
            }
        )
        self.scope = InstrumentationScope("meridian.gateway", gateway.__version__)
        self._epoch_offset_ns = time.time_ns() - time.perf_counter_ns()
        self._root_bound = TraceIdRatioBased(config.sample_ratio).bound
        if config.exporter != "none":
            self.use_exporter(build_exporter(config), batch=True)

    @property
    def enabled(self) -> bool:
        return self.processor is not None

    def use_exporter(self, exporter: SpanExporter, *, batch: bool = False) -> None:
        """Send spans to ``exporter`` (batched in a background thread, or one by one)."""
        self.shutdown()
        self.processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)

    def shutdown(self) -> None:
        """Flush and stop the exporter (spans of requests still running are dropped)."""
        if self.processor is not None:
            self.processor.shutdown()
        self.processor = None

    def epoch_ns(self, perf_s: float) -> int:
        return int(perf_s * 1e9) + self._epoch_offset_ns

    def enter(self, hop: HopContext, forward: dict[str, str]) -> HopContext:
        """A trace this gateway starts is sampled by ``sample_ratio`` — decided now, so the
        next hop is told (its ``traceparent`` flags) and records its part too."""
        if self.processor is None or hop.trace.parent_id is not None:
            return hop
        ctx = hop.trace
        # TraceIdRatioBased's rule: the trace id's low 64 bits under the ratio's bound.
        if int(ctx.trace_id[16:], 16) >= self._root_bound:
            return hop
        sampled = TraceContext(ctx.trace_id, ctx.span_id, None, _SAMPLED, ctx.tracestate)
        hop = replace(hop, trace=sampled)
        if TRACEPARENT in forward:
            forward[TRACEPARENT] = sampled.traceparent()
        return hop
