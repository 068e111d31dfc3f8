"""Metrics of the stream path's safety nets, on the gateway's registry (see gateway/metrics.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.observability.stream_buffers import HoldsBytes, StreamBuffers

_BUFFER_BUCKETS = (1024, 4096, 16384, 32768, 65536, 131072, 262144, 1048576)


class ReliabilityMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.extra_attempts = Counter(
            "meridian_extra_attempts",
            "Upstream attempts beyond a request's first, by kind (retry, hedge).",
            ["kind"],
            registry=registry,
        )
        self.retry_budget_denied = Counter(
            "meridian_retry_budget_denied",
            "Retries or hedges not made because the retry budget was spent.",
            registry=registry,
        )
        self.admission_refused = Counter(
            "meridian_admission_refused",
            "Requests refused by admission control (status 429 or 503).",
            ["status"],
            registry=registry,
        )
        self.stream_buffer = Histogram(
            "meridian_stream_buffer_max_bytes",
            "Most bytes one stream held in the gateway (upstream reader + client write buffer).",
            buckets=_BUFFER_BUCKETS,
            registry=registry,
        )
        self.stream_buffers = StreamBuffers()  # the peak and current bytes, live at scrape
        registry.register(self.stream_buffers)
        self.reloads = Counter(
            "meridian_config_reloads",
            "Configuration reloads by outcome (applied, rejected, unchanged).",
            ["outcome"],
            registry=registry,
        )

    def stream_started(self, stream: HoldsBytes) -> None:
        self.stream_buffers.opened(stream)

    def stream_ended(self, stream: HoldsBytes) -> None:
        self.stream_buffer.observe(self.stream_buffers.closed(stream))
