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


def moved_rows(
    view: FleetView,
    load: LoadColumns,
    touched: set[int],
    scaling: set[int],
    known: list[tuple[object, ...] | None],
) -> tuple[set[int], int]:
    """The rows of ``touched`` whose key moved, and how many did not. A row's key is every
    view and load value ``RowTerms._row`` reads for it: engine metrics or not, the RTT (an
    unknown one, NaN, as None: NaN equals nothing), depth, with metrics the engine's waiting
    and our prefill work (without, the local count is the depth), others' arrivals, and for a
    row in ``scaling`` its latest activity (``_cold_inputs``). What configuration and the
    learned columns give is not in it: a new layout or a learned row recomputes anyway.
    ``known`` holds each row's key of its last computation (None: unknown); the keys of the
    moved rows are written there. One loop with the columns bound once: it runs for every
    touched row of every decision, and most rows a scrape touched did move."""
    has_metrics, rtt_ms, depth = view.has_metrics, view.rtt_ms, load.depth
    others, others_rps = view.others_uncached, view.others_requests
    waiting, work = load.waiting, load.prefilling.work_ms
    moved: set[int] = set()
    reused = 0
    for row in touched:
        rtt = rtt_ms.item(row)
        key: tuple[object, ...] = (
            (True, rtt if rtt == rtt else None, depth.item(row), waiting.item(row), work[row],
             others.item(row), others_rps.item(row))
            if has_metrics.item(row)
            else (False, rtt if rtt == rtt else None, depth.item(row), others.item(row),
                  others_rps.item(row))
        )  # fmt: skip
        if row in scaling:
            key = (*key, last_active(view, load, row))
        if key == known[row]:
            reused += 1
        else:
            known[row] = key
            moved.add(row)
    return moved, reused


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
