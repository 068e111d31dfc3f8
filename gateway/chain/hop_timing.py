"""Per-hop timing across a chain of gateways: one header and one end-of-stream line.

Header. Each hop writes ``gw, route, upstream_connect, upstream_ttfb, ttft`` and keeps the next
hop's entries renamed ``<backend>.<name>`` (gateway/timing.py). When the next hop is a gateway
this module adds two of this hop's own entries after ``ttft``:

- ``net``: ``upstream_ttfb - <backend>.ttft``, the time between the hops (the round trip to the
  next gateway and its socket handling before it started its clock); its ``desc`` is the
  next hop's label, so a reader can follow the chain;
- ``hop``: ``desc="<gateway id> <span id>"``, which gateway and which trace span this was.

So a client reads, for A -> B -> backend:
``A.gw + A.net + B.gw + B.upstream_ttfb == A.ttft`` (up to rounding), i.e. its own TTFT less the
client-to-A network; :func:`breakdown` does that sum.

End-of-stream line. The next gateway's ``: meridian-timing {...}`` comment arrives inside the
upstream stream. It is taken out (never relayed, so the client sees one line) and merged: this
hop's summary keeps its flat keys and gains ``hops``: every hop's summary, this one first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.chain.hop import HopContext
from gateway.sse import SseEvent
from gateway.timing import TimingEntry, hop_prefix

TIMING_COMMENT = b": meridian-timing "
TIMING_HEADER = "X-Meridian-Timing"  # the same summary on a non-streaming reply


def annotate_entries(entries: list[TimingEntry], hop: HopContext, backend: str) -> None:
    """Add this hop's ``net`` (when the next hop reported its ttft) and ``hop`` entries, after
    the first ``ttft`` entry (at the end when there is none). One pass, no call per entry: it
    runs between the first token in and the first byte out."""
    label = hop_prefix(backend)  # what gateway.timing.label_hop files the next hop's entries as
    downstream_name = label + ".ttft"
    position = upstream = downstream = None
    for index, entry in enumerate(entries):
        name = entry.name
        if name == "ttft":
            if position is None:
                position = index + 1
        elif name == "upstream_ttfb":
            upstream = entry.dur_ms  # the last of a name counts, as a dict of them would say
        elif name == downstream_name:
            downstream = entry.dur_ms
    added = []
    if upstream is not None and downstream is not None:
        added.append(TimingEntry("net", max(0.0, upstream - downstream), label))
    added.append(TimingEntry("hop", None, f"{hop.gateway_id} {hop.trace.span_id}"))
    at = len(entries) if position is None else position
    entries[at:at] = added


@dataclass(frozen=True, slots=True)
class HopTiming:
    """One gateway's share of the first token, read back from a Server-Timing header."""

    label: str  # "" for the first gateway, "<backend>." prefixes for the next ones
    gateway: str | None  # the ``hop`` entry's gateway id, when present
    gw_ms: float
    net_ms: float | None  # to the next gateway; None for the last hop
    upstream_ttfb_ms: float
    ttft_ms: float


def breakdown(entries: Sequence[TimingEntry]) -> list[HopTiming]:
    """Every gateway hop in order, following the ``net`` entries down the chain."""
    by_name = {e.name: e for e in entries}
    hops: list[HopTiming] = []
    prefix = ""
    while (gw := by_name.get(prefix + "gw")) is not None and gw.dur_ms is not None:
        ttfb, ttft = by_name.get(prefix + "upstream_ttfb"), by_name.get(prefix + "ttft")
        if ttfb is None or ttft is None or ttfb.dur_ms is None or ttft.dur_ms is None:
            break
        net, hop = by_name.get(prefix + "net"), by_name.get(prefix + "hop")
        gateway = hop.desc.split(" ")[0] if hop is not None and hop.desc else None
        net_ms = net.dur_ms if net is not None else None
        hops.append(HopTiming(prefix, gateway, gw.dur_ms, net_ms, ttfb.dur_ms, ttft.dur_ms))
        if net is None or not net.desc:
            break
        prefix = f"{prefix}{net.desc}."
    return hops


def parts_sum_ms(hops: Sequence[HopTiming]) -> float:
    """Gateway time at every hop + network between them + the last hop's upstream TTFB."""
    if not hops:
        return 0.0
    between = sum(h.gw_ms + (h.net_ms or 0.0) for h in hops)
    return between + hops[-1].upstream_ttfb_ms


def take_timing_comment(event: SseEvent) -> list[dict[str, Any]] | None:
    """The hops a downstream gateway's timing comment lists; None if ``event`` is not one
    (a malformed one is still ours to drop: it yields an empty list)."""
    if event.data is not None or not event.raw.startswith(TIMING_COMMENT):
        return None
    return _hops(event.raw[len(TIMING_COMMENT) :].strip())


def hops_from_header(value: str | None) -> list[dict[str, Any]]:
    """The hops in a non-streaming reply's ``X-Meridian-Timing`` header (none if absent)."""
    return _hops(value.encode()) if value else []


def _hops(text: bytes) -> list[dict[str, Any]]:
    try:
        summary = orjson.loads(text)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(summary, dict):
        return []
    hops = summary.get("hops")
    if isinstance(hops, list):
        return [h for h in hops if isinstance(h, dict)]
    return [summary]


def merge_summary(
    summary: dict[str, Any], hop: HopContext | None, downstream: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """This hop's summary with ``hops``: itself first, then what the next gateway reported."""
    own = {**(hop.info() if hop is not None else {}), **summary}
    return {**own, "hops": [own, *downstream]}
