"""OpenTelemetry tracing: a tracer provider per gateway, or nothing at all.

With ``tracing.exporter: none`` (the default) no provider exists and no span is ever built: the
request path only continues the caller's ``traceparent`` (gateway/chain/trace.py), which it
does anyway. With an exporter, each request's span tree is built once, when the request ends
(:mod:`gateway.observability.spans`), from what the relay core recorded — never on the way
to the first token. The server span's ids are the hop's own (the trace id, and the span id the
next hop receives as its parent), handed to the SDK through :class:`_HopIds`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, TraceIdRatioBased

import gateway
from gateway.chain.hop import TRACEPARENT
from gateway.observability.config import TracingConfig

if TYPE_CHECKING:
    from gateway.chain.hop import HopContext

_SAMPLED = "01"


class TracingUnavailable(Exception):
    """``tracing.exporter: otlp`` without the OTLP exporter installed."""


class _HopIds(IdGenerator):
    """Random ids, except the server span's: those are the hop's own, set just before the SDK
    asks (synchronously, in the same call)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.next_trace_id: int | None = None
        self.next_span_id: int | None = None

    def generate_trace_id(self) -> int:
        value, self.next_trace_id = self.next_trace_id, None
        return value if value is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        value, self.next_span_id = self.next_span_id, None
        return value if value is not None else self._random.generate_span_id()


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
    """This gateway's tracer, or None; and the clock that turns perf_counter() into epoch ns."""

    def __init__(self, config: TracingConfig, instance: str | None = None) -> None:
        self.config = config
        self.instance = instance
        self.tracer: trace.Tracer | None = None
        self.ids = _HopIds()
        self._provider: TracerProvider | None = None
        self._epoch_offset_ns = time.time_ns() - time.perf_counter_ns()
        self._root_sampler = TraceIdRatioBased(config.sample_ratio)
        if config.exporter != "none":
            self.use_exporter(build_exporter(config), batch=True)

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    def use_exporter(self, exporter: SpanExporter, *, batch: bool = False) -> None:
        """Send spans to ``exporter`` (batched in a background thread, or one by one)."""
        self.shutdown()
        resource = Resource.create(
            {
                "service.name": self.config.service_name,
                "service.version": gateway.__version__,
                **({"service.instance.id": self.instance} if self.instance else {}),
            }
        )
        provider = TracerProvider(
            resource=resource,
            sampler=ParentBased(self._root_sampler),
            id_generator=self.ids,
            shutdown_on_exit=False,
        )
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        provider.add_span_processor(processor)
        self._provider = provider
        self.tracer = provider.get_tracer("meridian.gateway", gateway.__version__)

    def shutdown(self) -> None:
        """Flush and stop the exporter (spans of requests still running are dropped)."""
        if self._provider is not None:
            self._provider.shutdown()
        self._provider = self.tracer = None

    def epoch_ns(self, perf_s: float) -> int:
        return int(perf_s * 1e9) + self._epoch_offset_ns

    def enter(self, hop: HopContext, forward: dict[str, str]) -> HopContext:
        """A trace this gateway starts is sampled by ``sample_ratio`` — decided now, so the
        next hop is told (its ``traceparent`` flags) and records its part too."""
        if self.tracer is None or hop.trace.parent_id is not None:
            return hop
        trace_id = int(hop.trace.trace_id, 16)
        decision = self._root_sampler.should_sample(None, trace_id, "").decision
        if decision is not Decision.RECORD_AND_SAMPLE:
            return hop
        hop = replace(hop, trace=replace(hop.trace, flags=_SAMPLED))
        if TRACEPARENT in forward:
            forward[TRACEPARENT] = hop.trace.traceparent()
        return hop
