"""What ``RowTerms._row`` reads of a row from the view and the load, as one comparable value.

``RowTerms`` recomputes a row when the view rewrote it or the load touched it, but most of those
changes move nothing the row's terms depend on: a reservation and its release put every input
back (the chosen row of each decision), and an in-flight count is read only by a row without
engine metrics (its depth comes from the scrape otherwise). Comparing this key with the one of
the row's last computation finds those, exactly.
"""

from __future__ import annotations

from routing.fleet_view import FleetView
from routing.load import LoadColumns

_INF = float("inf")
_NAN = float("nan")


def row_inputs_key(
    view: FleetView, load: LoadColumns, row: int, scales: bool
) -> tuple[object, ...]:
    """Every view and load value ``RowTerms._row`` reads for ``row`` (``scales``: the row
    scales to zero, so ``_cold_inputs`` reads its latest activity too); what configuration and
    the learned columns give is not in it (a new layout or a learned row recomputes anyway).
    Two equal keys mean equal inputs (an unknown RTT, NaN, is None here: NaN equals nothing)."""
    metrics, rtt = view.has_metrics.item(row), view.rtt_ms.item(row)
    key: tuple[object, ...] = (
        metrics, rtt if rtt == rtt else None, load.depth.item(row),
        load.waiting.item(row) if metrics else 0.0,  # (without metrics: local, the depth)
        load.prefilling.work_ms[row] if metrics else 0.0,
        view.others_uncached.item(row), view.others_requests.item(row),
    )  # fmt: skip
    if scales:
        return (*key, last_active(view, load, row))
    return key


def last_active(view: FleetView, load: LoadColumns, row: int) -> float:
    """Our last traffic, reservation or warm-up, or a scrape showing the engine running
    sequences then, whoever's they were (-inf: none). Waiting alone is not activity: a waking
    engine queues everything until its cold start is over."""
    busy = view.running0.item(row) > 0
    seen = (
        view.last_traffic_at.item(row),
        load.last_reserved_at.item(row),
        load.last_warmed_at.item(row),
        view.metrics_as_of.item(row) if busy else _NAN,
    )
    return max((at for at in seen if at == at), default=-_INF)
