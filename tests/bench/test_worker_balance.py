"""Requests per worker from the host's merged ``/metrics`` (``metrics_view.merge``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from gateway.metrics import GatewayMetrics
from gateway.workers.metrics_view import merge
from loadtests.worker_balance import format_balance, requests_by_worker


def _page(ok: int, failed: int, grpc: int = 0) -> str:
    metrics = GatewayMetrics(CollectorRegistry())
    labels = {"protocol": "http", "endpoint": "chat", "model": "m"}
    metrics.requests.labels(**labels, status="200").inc(ok)
    metrics.requests.labels(**labels, status="503").inc(failed)
    if grpc:
        metrics.requests.labels(**{**labels, "protocol": "grpc"}, status="200").inc(grpc)
    return generate_latest(metrics.registry).decode()


def test_requests_are_summed_per_worker_over_every_status() -> None:
    merged = merge([("0", _page(30, 2)), ("1", _page(34, 0))]).decode()
    counts = requests_by_worker(merged)
    assert counts == {"0": 32.0, "1": 34.0}
    assert "worker 0: 32 (48.5%)" in format_balance("x2", counts)


def test_a_gateway_without_workers_is_one_entry() -> None:
    assert requests_by_worker(_page(5, 1)) == {"": 6.0}


def test_one_doors_requests_by_worker() -> None:
    merged = merge([("0", _page(30, 2, grpc=7)), ("1", _page(34, 0))]).decode()
    assert requests_by_worker(merged, "grpc") == {"0": 7.0}
    assert requests_by_worker(merged, "http") == {"0": 32.0, "1": 34.0}
    assert requests_by_worker(merged) == {"0": 39.0, "1": 34.0}
