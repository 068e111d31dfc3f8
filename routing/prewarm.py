"""Pre-warm: keep a share of the serverless pool warm with one-token warm-up requests.

A serverless pool that no request has needed yet (or that scaled to zero between bursts) is
cold when the next burst comes, and every request routing sends there pays the cold start. The
keep-warm credit (routing.keep_warm) only keeps a backend warm that is warm already, and only
while traffic is near enough to take the credit. An operator who would rather pay for warm
capacity than for cold starts sets a share of the serverless backends to keep warm: the router
then names, at each call of ``warm_up``, the kept backends that are cold or idle for
``after`` x their idle timeout, and the gateway (or the simulator) sends each a one-token
request. The kept ones are those warm now, then the nearest: waking a cold one only when too
few are warm, so a warm pool is kept, never rotated.

A warm-up is activity: the predictor sees it as the backend's last traffic (``LoadColumns
.warmed``) and, for a backend that was possibly cold, as a cold start in progress, so
requests are not sent to wait behind it before it is over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from routing.fleet_view import FleetView
from routing.predictor_rows import RowTerms


@dataclass(frozen=True, slots=True)
class PrewarmParams:
    share: float = 0.0  # of the backends that scale to zero, kept warm (rounded up; 0: off)
    after: float = 0.8  # a kept backend idle this fraction of its idle timeout gets a warm-up


def warm_up_rows(view: FleetView, rt: RowTerms, params: PrewarmParams, now: float) -> list[int]:
    """Rows of ``view`` to send a warm-up to now. ``rt`` must be synced to ``view``."""
    scaling = rt.scaling_rows
    if params.share <= 0.0 or len(scaling) == 0:
        return []
    kept = min(len(scaling), math.ceil(params.share * len(scaling) - 1e-9))
    timeout = view.idle_timeout_s[scaling]
    idle_base = rt.idle_base[scaling]
    warm = now < idle_base + timeout  # -inf (never seen active): cold
    order = np.lexsort((rt.rtt[scaling], ~warm))[:kept]  # warm first, then the nearest
    due = idle_base[order] + params.after * timeout[order] <= now
    return [int(row) for row in scaling[order][due]]
