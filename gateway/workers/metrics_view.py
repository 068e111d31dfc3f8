"""One ``/metrics`` for all the workers of a host.

A scrape lands on whichever worker the kernel picks; that worker asks every peer for its own
page over the peer's private Unix socket (``GET /metrics?worker=self``), adds a ``worker``
label to every sample, and answers with one exposition: sum over ``worker`` for host totals
(``sum without (worker) (rate(meridian_requests_total[1m]))``). A peer that does not answer
within ``PEER_TIMEOUT_S`` (restarting) is left out of that scrape, and
``meridian_workers_answering`` says how many were in it. The request path is never involved.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

PEER_TIMEOUT_S = 2.0
SELF_QUERY = "self"

MetricsView = Callable[[web.Request], Awaitable[web.Response]]
METRICS_VIEW: web.AppKey[MetricsView] = web.AppKey("metrics_view")


def merge(pages: Iterable[tuple[str, str]]) -> bytes:
    """``(worker, exposition text)`` pages as one exposition, samples labelled by worker."""
    families: dict[str, Metric] = {}
    answering = 0
    for worker, text in pages:
        answering += 1
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            merged.samples.extend(
                Sample(s.name, {**s.labels, "worker": worker}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            )
    count = GaugeMetricFamily(
        "meridian_workers_answering", "Workers whose metrics are in this scrape"
    )
    count.add_metric([], answering)
    families[count.name] = count

    class _Pages:
        def collect(self) -> Iterable[Metric]:
            return families.values()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Pages())
    return generate_latest(registry)


async def _peer_page(path: str) -> str | None:
    connector = aiohttp.UnixConnector(path=path)
    timeout = aiohttp.ClientTimeout(total=PEER_TIMEOUT_S)
    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.get(f"http://worker/metrics?worker={SELF_QUERY}") as response,
        ):
            if response.status == 200:
                return await response.text()
    return None


def host_metrics_view(
    own: Callable[[], bytes], index: int, peer_sockets: Sequence[str]
) -> MetricsView:
    """The ``/metrics`` handler of worker ``index``; ``peer_sockets[i]`` is worker i's."""

    async def view(request: web.Request) -> web.Response:
        if request.query.get("worker") == SELF_QUERY:
            return web.Response(body=own(), headers={"Content-Type": CONTENT_TYPE_LATEST})
        others = [i for i in range(len(peer_sockets)) if i != index]
        texts = await asyncio.gather(*(_peer_page(peer_sockets[i]) for i in others))
        pages = [(str(index), own().decode())]
        pages += [(str(i), text) for i, text in zip(others, texts, strict=True) if text is not None]
        pages.sort(key=lambda page: int(page[0]))
        return web.Response(body=merge(pages), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return view
