"""Prometheus metrics for the gateway, on a registry of its own (several gateways can share a
process in tests). Labels are bounded by configuration: model and backend names come from the
config, never from client input, and no prompt text ever becomes a label.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

_Metric = TypeVar("_Metric", bound=MetricWrapperBase)

LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0)
# What operators filter latency and tokens by; every value is one the config names, or "other"
# (gateway/observability/labels.py).
ROUTE_LABELS = ("model", "region", "backend", "door")
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class LabelledChildren(dict[Any, _Metric], Generic[_Metric]):
    """A labelled metric's children by their label values (a string, or a tuple of them): a
    hit is one dict lookup in C, where ``labels()`` is three Python calls. Only for labels
    bounded by the config (backend names, outcomes): a child is kept for the process's life,
    as prometheus_client keeps it (nothing here removes one)."""

    def __init__(self, metric: _Metric) -> None:
        super().__init__()
        self.metric = metric

    def __missing__(self, key: Any) -> _Metric:
        child: _Metric = self.metric.labels(*key if isinstance(key, tuple) else (key,))
        self[key] = child
        return child


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "meridian_requests",
            "Client requests by outcome.",
            ["protocol", "endpoint", "model", "status"],
            registry=r,
        )
        self.upstream_attempts = Counter(
            "meridian_upstream_attempts",
            "Upstream attempts by backend and outcome (ok, or the failure kind).",
            ["backend", "outcome"],
            registry=r,
        )
        self.in_flight = Gauge(
            "meridian_upstream_in_flight", "Open upstream requests.", ["backend"], registry=r
        )
        # The children the request path counts on, looked up once (LabelledChildren).
        self.requests_of = LabelledChildren(self.requests)
        self.upstream_attempts_of = LabelledChildren(self.upstream_attempts)
        self.in_flight_of = LabelledChildren(self.in_flight)
        self.ttft = Histogram(
            "meridian_ttft_seconds",
            "Time to first token of a stream as seen by the gateway (arrival to first token).",
            ROUTE_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "meridian_itl_seconds",
            "Gaps between streamed output events.",
            ROUTE_LABELS,
            buckets=_ITL_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "meridian_request_duration_seconds",
            "Arrival to last byte.",
            ROUTE_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "meridian_gateway_overhead_seconds",
            "Gateway's own time before the first byte went out (excludes waiting on upstreams).",
            buckets=_OVERHEAD_BUCKETS,
            registry=r,
        )
        self.route_decision = Histogram(
            "meridian_route_decision_seconds",
            "Time to take a routing decision.",
            buckets=_OVERHEAD_BUCKETS,
            registry=r,
        )
        self.output_tokens = Counter(
            "meridian_output_tokens", "Output tokens relayed.", ROUTE_LABELS, registry=r
        )
        self.prediction_error = Histogram(
            "meridian_ttft_prediction_error_ratio",
            "(observed - predicted) / predicted TTFT, for calibration.",
            ["backend"],
            buckets=(-1.0, -0.5, -0.25, -0.1, -0.05, 0.0, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0),
            registry=r,
        )
        self.prediction_error_of = LabelledChildren(self.prediction_error)
        self.explorations = Counter(
            "meridian_route_explorations",
            "Requests routed to re-measure a backend whose evidence was old (routing.exploration).",
            ["backend"],
            registry=r,
        )
        self.stream_errors = Counter(
            "meridian_stream_errors",
            "Streams that failed after the first token, by kind.",
            ["backend", "kind"],
            registry=r,
        )
