"""Per-request metrics, updated once per request by the observer (never by a door).

Histograms and counters carry ``model``, ``region``, ``backend`` and ``door`` — the labels
operators filter by — bounded by the configuration (see :mod:`gateway.observability.labels`).
The names map one-to-one to vLLM's and to the OpenTelemetry GenAI conventions
(``docs/observability.md``). TTFT, ITL, e2e and output tokens share their names with the
existing histograms of :class:`gateway.metrics.GatewayMetrics`, which now carry these labels.
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Counter, Histogram, Info
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

import gateway
from gateway.build_info import routing_build
from gateway.metrics import LATENCY_BUCKETS, ROUTE_LABELS, LabelledChildren

_QUEUE_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RequestMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.prompt_tokens = Counter(
            "meridian_prompt_tokens",
            "Prompt tokens of requests served (the backend's usage, else the gateway's estimate).",
            ROUTE_LABELS,
            registry=r,
        )
        self.cached_tokens = Counter(
            "meridian_cached_prompt_tokens",
            "Prompt tokens the backend reported served from its prefix cache.",
            ROUTE_LABELS,
            registry=r,
        )
        self.admission_queue = Histogram(
            "meridian_admission_queue_time_seconds",
            "Time a request waited for an admission slot in the gateway.",
            ROUTE_LABELS,
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.backend_queue = Histogram(
            "meridian_request_queue_time_seconds",
            "Time the request waited in the backend's queue, as the backend reported it.",
            ROUTE_LABELS,
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.outcomes = Counter(
            "meridian_request_outcomes",
            "Requests by how they ended: ok, failed (an error status or a broken stream), "
            "cancelled (the client left).",
            (*ROUTE_LABELS, "outcome"),
            registry=r,
        )
        self.attempts = Counter(
            "meridian_attempt_outcomes",
            "Upstream attempts by kind (first, retry, hedge) and outcome (ok, cancelled, "
            "429, 4xx, 5xx, timeout, connect, ...).",
            ("backend", "kind", "outcome"),
            registry=r,
        )
        self.predicted_ttft = Histogram(
            "meridian_ttft_predicted_seconds",
            "Routing's predicted TTFT of the backend that served a stream (compare with "
            "meridian_ttft_seconds for calibration).",
            ["backend"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # Looked up once per label values, not by ``labels()`` on each request (bounded by the
        # config: backend names, attempt kinds, outcome classes).
        self.attempts_of = LabelledChildren(self.attempts)
        self.predicted_ttft_of = LabelledChildren(self.predicted_ttft)
        Info("meridian_build", "Meridian's version and runtime.", registry=r).info(
            {
                "version": gateway.__version__,
                "python_version": platform.python_version(),
                "implementation": platform.python_implementation(),
                "routing": routing_build(),  # compiled or interpreted (gateway/build_info.py)
            }
        )
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
