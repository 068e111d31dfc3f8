"""Prometheus metrics under vLLM's names, one registry per emulated backend."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from loadtests.emulator.engine import EngineCounters

# vLLM's own bucket boundaries, so dashboards and signal readers see the same shape.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip

EMIT_LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

LABEL = ("model_name",)


class EngineMetrics:
    def __init__(self, engine_model: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._engine_model = engine_model
        r = self.registry
        self.running = Gauge("vllm:num_requests_running", "Running sequences", LABEL, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Waiting sequences", LABEL, registry=r)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 0..1", LABEL, registry=r)
        self.prefix_queries = Counter(
            "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache", LABEL,
            registry=r,
        )  # fmt: skip
        self.prefix_hits = Counter(
            "vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache", LABEL, registry=r
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Time to first token", LABEL,
            buckets=TTFT_BUCKETS, registry=r,
        )  # fmt: skip
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "Inter-token latency", LABEL,
            buckets=ITL_BUCKETS, registry=r,
        )  # fmt: skip
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency", LABEL,
            buckets=E2E_BUCKETS, registry=r,
        )  # fmt: skip
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens", LABEL, registry=r)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Generated tokens", LABEL, registry=r
        )
        self.request_success = Counter(
            "vllm:request_success", "Finished requests", (*LABEL, "finished_reason"), registry=r
        )
        for reason in ("stop", "length", "abort"):  # vLLM exports every reason from the start
            self.request_success.labels(engine_model, reason)
        # Not vLLM's: the emulator's own error, how late its events left against the engine
        # model's times (per request: the worst; and the sum over every event, for the mean).
        self.emit_lag_max = Histogram(
            "meridian_emulator_emit_lag_max_seconds",
            "Per request, the latest any of its events left the emulator versus the model",
            buckets=EMIT_LAG_BUCKETS, registry=r,
        )  # fmt: skip
        self.emit_lag_total = Counter(
            "meridian_emulator_emit_lag_seconds",
            "Lateness of every emitted event versus the engine model, summed",
            registry=r,
        )
        self.emitted_events = Counter(
            "meridian_emulator_emitted_events", "Events emitted (for the mean lag)", registry=r
        )
        self._seen_queries = 0
        self._seen_hits = 0

    def emit_lag(self, worst_s: float, total_s: float, events: int) -> None:
        """One finished request's lateness (observed once per request: cheap per token)."""
        self.emit_lag_max.observe(max(worst_s, 0.0))
        self.emit_lag_total.inc(max(total_s, 0.0))
        self.emitted_events.inc(events)

    def exposition(self, counters: EngineCounters) -> bytes:
        """Bring the engine-level gauges up to date, then render the text format."""
        model = self._engine_model
        if counters.prefix_queries_tokens < self._seen_queries:  # the engine was reset
            self._seen_queries = self._seen_hits = 0
        self.running.labels(model).set(counters.running)
        self.waiting.labels(model).set(counters.waiting)
        self.kv_usage.labels(model).set(counters.kv_cache_usage)
        self.prefix_queries.labels(model).inc(counters.prefix_queries_tokens - self._seen_queries)
        self.prefix_hits.labels(model).inc(counters.prefix_hits_tokens - self._seen_hits)
        self._seen_queries = counters.prefix_queries_tokens
        self._seen_hits = counters.prefix_hits_tokens
        return generate_latest(self.registry)
