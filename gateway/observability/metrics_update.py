"""One set of metric updates per request: at its first token, and when it ends."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gateway.metrics import GatewayMetrics
from gateway.observability.bulk_observe import observe_all
from gateway.observability.labels import NO_BACKEND, LabelBounds, outcome_class
from gateway.observability.live_stats import LiveStats
from gateway.observability.record import Outcome, RequestRecord
from gateway.observability.request_metrics import RequestMetrics

if TYPE_CHECKING:
    from gateway.config import GatewayConfig
    from gateway.opened_stream import OpenedStream


class RouteSeries:
    """The children of every per-route metric for one (model, region, backend, door): looked
    up once, not by ``labels()`` on each request (label values are bounded by the config, so
    are these)."""

    __slots__ = (
        "admission_queue",
        "backend_queue",
        "cached_tokens",
        "e2e",
        "itl",
        "outcomes",
        "output_tokens",
        "prompt_tokens",
        "ttft",
    )

    def __init__(self, gw: GatewayMetrics, req: RequestMetrics, labels: tuple[str, ...]) -> None:
        self.ttft = gw.ttft.labels(*labels)
        self.itl = gw.itl.labels(*labels)
        self.e2e = gw.e2e.labels(*labels)
        self.output_tokens = gw.output_tokens.labels(*labels)
        self.prompt_tokens = req.prompt_tokens.labels(*labels)
        self.cached_tokens = req.cached_tokens.labels(*labels)
        self.admission_queue = req.admission_queue.labels(*labels)
        self.backend_queue = req.backend_queue.labels(*labels)
        self.outcomes = {o: req.outcomes.labels(*labels, o.value) for o in Outcome}


class MetricsUpdate:
    def __init__(self, config: GatewayConfig, metrics: GatewayMetrics) -> None:
        self.bounds = LabelBounds.from_config(config)
        self.gateway = metrics
        self.request = RequestMetrics(metrics.registry)
        self.live = LiveStats()  # for the status page
        self._series: dict[tuple[str, ...], RouteSeries] = {}

    def configure(self, config: GatewayConfig) -> None:
        self.bounds = LabelBounds.from_config(config)

    def _labels(self, record: RequestRecord, opened: OpenedStream | None) -> tuple[str, ...]:
        model, door = record.inbound.model, record.door
        if opened is None:
            return self.bounds.route(model, NO_BACKEND, NO_BACKEND, door)
        return self.bounds.route(model, opened.route.region, opened.route.backend, door)

    def _route(self, record: RequestRecord, opened: OpenedStream | None) -> RouteSeries:
        labels = self._labels(record, opened)
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = RouteSeries(self.gateway, self.request, labels)
        return series

    def first_token(self, record: RequestRecord, opened: OpenedStream) -> None:
        """TTFT and calibration, as soon as the first token is in (a stream may run for
        minutes; its TTFT should not wait for its end). Streams only: a whole non-streaming
        body is no time to first token."""
        if not record.inbound.stream:
            return
        first = opened.exchange.stats.first_token_at or time.perf_counter()
        ttft_s = first - record.inbound.received_at
        self._route(record, opened).ttft.observe(ttft_s)
        predicted_ms = opened.route.predicted_ttft_ms
        self.live.first_token(opened.route.backend, ttft_s * 1000.0, predicted_ms)
        if predicted_ms:
            backend = self.bounds.backend(opened.route.backend)
            error = (ttft_s * 1000.0 - predicted_ms) / predicted_ms
            self.gateway.prediction_error_of[backend].observe(error)
            self.request.predicted_ttft_of[backend].observe(predicted_ms / 1000.0)

    def ended(
        self, record: RequestRecord, opened: OpenedStream | None, now: float, outcome: Outcome
    ) -> None:
        series = self._route(record, opened)
        series.outcomes[outcome].inc()
        self._attempts(record)
        if record.queue_s is not None:
            series.admission_queue.observe(record.queue_s)
        if opened is None:
            return
        self.live.served(opened.route.backend, now)
        series.e2e.observe(now - record.inbound.received_at)
        series.output_tokens.inc(opened.exchange.output_tokens())
        usage = opened.exchange.usage or {}
        prompt = usage.get("prompt_tokens")
        prompt_tokens = prompt if isinstance(prompt, int) else record.inbound.profile.prompt_tokens
        series.prompt_tokens.inc(prompt_tokens)
        cached = opened.exchange.cached_tokens()
        if cached:
            series.cached_tokens.inc(cached)
        observe_all(series.itl, [gap / 1000.0 for gap in opened.exchange.stats.gaps_ms])
        for entry in opened.exchange.backend_timing:
            if entry.name == "queue" and entry.dur_ms is not None:
                series.backend_queue.observe(entry.dur_ms / 1000.0)

    def _attempts(self, record: RequestRecord) -> None:
        counters = self.request.attempts_of
        for index, attempt in enumerate(record.attempts()):
            kind = "hedge" if attempt["hedge"] else ("first" if index == 0 else "retry")
            backend = self.bounds.backend(attempt["backend"])
            counters[backend, kind, outcome_class(attempt["outcome"])].inc()

    def rejected(self, model: str, door: str) -> None:
        labels = self.bounds.route(model, NO_BACKEND, NO_BACKEND, door)
        self.request.outcomes.labels(*labels, Outcome.FAILED.value).inc()  # rare: no cache
