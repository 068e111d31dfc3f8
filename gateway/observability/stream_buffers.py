"""What open streams hold in the gateway, read when Prometheus scrapes.

A stream's buffer histogram (``meridian_stream_buffer_max_bytes``) can only be observed when the
stream ends, so a stream stuck behind a slow reader — the one worth seeing — showed nothing
while it was stuck, and the peak gauge, set at the same moment, stayed 0. Here every open
stream is asked at scrape time how much it holds now: the peak and the current total are live.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class HoldsBytes(Protocol):
    max_buffered: int

    def held_now(self) -> int:
        """Bytes held for this stream right now (and ``max_buffered`` raised to match)."""
        ...


class StreamBuffers(Collector):
    def __init__(self) -> None:
        self._open: set[HoldsBytes] = set()
        self._peak = 0

    def opened(self, stream: HoldsBytes) -> None:
        self._open.add(stream)

    def closed(self, stream: HoldsBytes) -> int:
        """Forget ``stream``; returns the most it held."""
        self._open.discard(stream)
        self._peak = max(self._peak, stream.max_buffered)
        return stream.max_buffered

    def collect(self) -> Iterator[Metric]:
        held = [stream.held_now() for stream in list(self._open)]
        peak = max([self._peak, *(s.max_buffered for s in self._open)])
        self._peak = peak
        yield GaugeMetricFamily(
            "meridian_stream_buffer_peak_bytes",
            "The most bytes any one stream has held in the gateway since start (open streams "
            "included).",
            value=peak,
        )
        yield GaugeMetricFamily(
            "meridian_stream_buffer_bytes",
            "Bytes the open streams hold in the gateway now (upstream reader + client buffer).",
            value=sum(held),
        )
        yield GaugeMetricFamily(
            "meridian_streams_open", "Streams being relayed to clients now.", value=len(held)
        )
