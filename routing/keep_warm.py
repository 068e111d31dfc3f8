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

import numpy as np

from routing.fleet_view import F64, FleetView, Rows
from routing.load import LoadColumns
from routing.predictor_rows import RowTerms


def keep_warm_credit(
    view: FleetView,
    rows: Rows,
    load: LoadColumns,
    rt: RowTerms,
    now: float,
    margin_ms: float,
    after: float,
) -> F64 | None:
    """Credit (ms, to subtract from the score) per eligible row; None when no row earns one.

    A row earns it when it scales to zero, was last active ``after`` x its idle timeout ago
    or more but not yet long enough to be possibly cold, and has none of our requests open.
    ``rt`` must be synced to ``view`` (its idle bases are this decision's)."""
    if margin_ms <= 0.0 or not rt.scales:
        return None
    idle = now - rt.idle_base[rows]  # +inf: never seen active; -inf: never scales to zero
    warm = idle < rt.cold_after[rows]  # before P(cold) starts to rise
    due = idle >= after * view.idle_timeout_s[rows]
    earns = warm & due & (load.open[rows] < 1.0)
    if not earns.any():
        return None
    credit: F64 = np.where(earns, margin_ms, 0.0)
    return credit
