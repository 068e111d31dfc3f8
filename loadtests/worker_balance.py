"""How evenly the kernel's ``SO_REUSEPORT`` spread a run over the workers of one gateway:
requests counted by each worker, read from the host's one ``/metrics`` view (every sample
labelled ``worker``, ``gateway/workers/metrics_view.py``)."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

REQUESTS = "meridian_requests_total"


def requests_by_worker(exposition: str, protocol: str | None = None) -> dict[str, float]:
    """Client requests per ``worker`` label in a ``/metrics`` page (one ``""`` entry for a
    gateway without workers); ``protocol``: only that door's (http, grpc)."""
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == REQUESTS and protocol in (None, sample.labels.get("protocol")):
                worker = sample.labels.get("worker", "")
                counts[worker] = counts.get(worker, 0.0) + sample.value
    return dict(sorted(counts.items()))


async def fetch_requests_by_worker(admin_url: str, protocol: str | None = None) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(admin_url + "/metrics") as response,
    ):
        response.raise_for_status()
        return requests_by_worker(await response.text(), protocol)


def format_balance(title: str, counts: dict[str, float]) -> str:
    total = sum(counts.values()) or 1.0
    shares = ", ".join(f"worker {w}: {n:.0f} ({n / total:.1%})" for w, n in counts.items())
    return f"{title} requests by worker since start: {shares}"
