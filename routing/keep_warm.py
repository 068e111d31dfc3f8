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

import numpy as np

from routing.fleet_view import F64, FleetView, Rows
from routing.load import LoadColumns
from routing.predictor_rows import RowTerms


def keep_warm_credit(
    view: FleetView, rows: Rows, load: LoadColumns, rt: RowTerms, now: float, margin_ms: float
) -> F64 | None:
    """Credit (ms, to subtract from the score) per eligible row; None when no row earns one.

    A row earns it when it scales to zero, was last active long enough ago to be due
    (``PredictorParams.keep_warm_after`` x its idle timeout) but not yet long enough to be
    possibly cold, and has none of our requests open. ``rt`` must be synced to ``view``."""
    if margin_ms <= 0.0 or not rt.scales:
        return None
    scaling = rt.scaling_rows
    earns = (rt.keep_warm_due[scaling] <= now) & (rt.warm_until[scaling] > now)
    if not earns.any():
        return None
    earning = scaling[earns]
    earning = earning[load.open[earning] < 1.0]
    if len(earning) == 0:
        return None
    full: F64 = np.zeros(len(view))
    full[earning] = margin_ms
    if len(rows) == len(full):
        return full
    credit: F64 = full[rows]
    return credit if credit.any() else None


def keep_warm_rows(
    rows: Sequence[int], load: LoadColumns, rt: RowTerms, now: float, margin_ms: float
) -> list[float] | None:
    """``keep_warm_credit`` for the scalar path: the credit per row of ``rows`` as floats."""
    if margin_ms <= 0.0 or not rt.scales:
        return None
    due, warm_until, open_now = rt.keep_warm_due, rt.warm_until, load.open
    earning = {
        row
        for row in rt.scaling_list
        if due.item(row) <= now and warm_until.item(row) > now and open_now.item(row) < 1.0
    }
    if not earning.intersection(rows):
        return None
    return [margin_ms if row in earning else 0.0 for row in rows]
