"""Keep-warm credit: a score term that keeps an idle serverless pool from scaling to zero.

Bursty traffic concentrated on the best backends leaves a serverless backend idle until its
idle timeout takes it to zero; the next burst then pays its cold start. A warm, idle serverless
backend approaching its timeout gets a credit of ``margin_ms`` off its score, so a request whose
predicted TTFT there is within that margin of the best goes there and resets the timer. The
credit lives in the score only (like placement), never in the predicted TTFT, and costs at most
one request per backend per ``after`` x idle timeout: that request resets the idle clock, and
with it the credit.
"""

from __future__ import annotations

from collections.abc import Sequence

from routing.fleet_view import FleetView, Rows, eligible_positions
from routing.load import LoadColumns
from routing.predictor_rows import RowTerms


def earning(load: LoadColumns, rt: RowTerms, now: float) -> set[int]:
    """Rows that earn the credit now: they scale to zero, were last active long enough ago to
    be due (``PredictorParams.keep_warm_after`` x their idle timeout) but not yet long enough
    to be possibly cold, and have none of our requests open. ``rt`` must be synced.

    A loop over the serverless rows, not array work: they are a few, and at c=1 every
    distinct numpy call costs 5-30 us (a dozen of them here before)."""
    due, warm_until, open_now = rt.keep_warm_due, rt.warm_until, load.open
    return {
        row
        for row in rt.scaling_list
        if due.item(row) <= now and warm_until.item(row) > now and open_now.item(row) < 1.0
    }


def keep_warm_positions(
    view: FleetView, rows: Rows, load: LoadColumns, rt: RowTerms, now: float, margin_ms: float
) -> list[int]:
    """Positions into the eligible ``rows`` that earn a credit of ``margin_ms`` off their
    score (none when the credit is off or nothing scales to zero)."""
    if margin_ms <= 0.0 or not rt.scales:
        return []
    return eligible_positions(rows, len(view), sorted(earning(load, rt, now)))


def keep_warm_rows(
    rows: Sequence[int], load: LoadColumns, rt: RowTerms, now: float, margin_ms: float
) -> list[float] | None:
    """The credit per row of ``rows`` as floats (the scalar path); None when none earns."""
    if margin_ms <= 0.0 or not rt.scales:
        return None
    earns = earning(load, rt, now)
    if not earns.intersection(rows):
        return None
    return [margin_ms if row in earns else 0.0 for row in rows]
