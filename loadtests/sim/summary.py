"""One policy's run reduced to the numbers users quote, and the comparisons the goals ask for.

Definitions:
- TTFT: a request's arrival at its gateway -> its first token back at that gateway.
- end-to-end: arrival -> last token back at the gateway.
- cache-hit token ratio: prompt tokens the engines served from their KV cache / all prompt tokens.
- load imbalance: max / mean over every backend of the requests it served (``imbalance``) and
  of the tokens it computed, uncached prompt + output (``work_imbalance``); 1.0 is even.
- cross-region share: requests served outside the client's own region.
- calibration (policies that predict): median |predicted - actual| / actual TTFT, and the
  share of actual TTFTs at or below the predicted p90.
- exploration share: routed requests sent to re-measure a backend whose evidence was old.
- serverless cost: warm-up requests sent (pre-warm), cold starts (an engine woken from zero
  by any request, warm-ups included) and the share of serverless backend-time spent warm.
- goodput: the share of requests that met the scenario's joint objective, TTFT within
  ``objective.ttft_ms`` and mean inter-token gap (end-to-end minus TTFT, over the tokens
  after the first) within ``objective.itl_ms``; rejected requests count as missed. (The
  simulator keeps no per-token times, so it is each request's mean ITL, not its p99.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from loadtests.sim.loop import REJECT_SUFFIX
from loadtests.sim.results import F64, PolicyRun
from loadtests.sim.trace import Trace

# Not baselines, though every table shows them: the oracle (it knows what no gateway can) and
# Meridian's own policies. ``slo_cost`` is predicted_ttft's predictor with a cost objective on
# top (where no candidate meets the objective it picks exactly what predicted_ttft would), so
# a TTFT or e2e it wins is ours already, not a peer's bar to beat.
BASELINES_EXCLUDED = ("predicted_ttft", "slo_cost", "oracle")


def is_baseline(policy: str) -> bool:
    """Not one of ``BASELINES_EXCLUDED``, with or without early rejection (``+reject``)."""
    return policy.removesuffix(REJECT_SUFFIX) not in BASELINES_EXCLUDED


@dataclass(frozen=True, slots=True)
class Summary:
    policy: str
    requests: int
    completed: int
    rejected: int
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    e2e_p50_ms: float
    e2e_p90_ms: float
    e2e_p99_ms: float
    long_form_e2e_p99_ms: float | None
    interactive_ttft_p99_ms: float | None
    cache_hit_ratio: float
    imbalance: float
    work_imbalance: float
    cross_region_share: float
    calibration_median_rel_error: float | None
    calibration_below_p90: float | None
    goodput: float
    exploration_share: float  # of routed requests, sent to re-measure a backend
    per_backend_requests: Mapping[str, int]
    wall_s: float
    # Serverless cost (None without serverless backends): warm-ups sent, engines woken from
    # zero (by any request), and the share of serverless backend-time spent warm.
    warm_ups: int = 0
    cold_starts: int = 0
    serverless_warm_share: float | None = None
    # The mean end-to-end time: what the whole-answer score (routing/answer_score.py) adds up
    # per request, its TTFT and its decode with the decode it adds to the others'. A router can
    # win it while a percentile moves the other way (docs/sessions/2026-12-03-session13.md).
    e2e_mean_ms: float | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _pct(values: F64, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def _max_over_mean(values: F64) -> float:
    mean = float(values.mean()) if len(values) else 0.0
    return float(values.max()) / mean if mean > 0 else float("nan")


def _goodput(
    ttft: F64, e2e: F64, output: F64, requests: int, ttft_ms: float, itl_ms: float
) -> float:
    gaps = np.maximum(output - 1.0, 1.0)
    itl = np.where(output > 1, (e2e - ttft) / gaps, 0.0)
    good = int(((ttft <= ttft_ms) & (itl <= itl_ms)).sum())
    return good / requests if requests else float("nan")


def summarize(
    run: PolicyRun, trace: Trace, ttft_ms: float = 500.0, itl_ms: float = 50.0
) -> Summary:
    res = run.results
    done = ~np.isnan(res.ttft_ms)
    prompt, long_form = res.prompt_tokens, res.long_form
    backend_region = np.asarray([trace.regions.index(b.region) for b in run.backends], np.int16)
    served = res.backend[done]
    counts = np.bincount(served, minlength=len(run.backends)).astype(np.float64)
    work = np.bincount(
        served,
        weights=(prompt - res.cached_tokens + res.output_tokens)[done],
        minlength=len(run.backends),
    ).astype(np.float64)
    cross = int((backend_region[served] != trace.origins[done]).sum())
    ttft, e2e = res.ttft_ms[done], res.e2e_ms[done]
    lf, inter = done & long_form, done & ~long_form
    mixed = bool(lf.any()) and bool(inter.any())
    rel_error, below = _calibration(res.predicted_ms, res.predicted_p90_ms, res.ttft_ms, done)
    completed = int(done.sum())
    return Summary(
        policy=run.policy,
        requests=len(trace),
        completed=completed,
        rejected=res.rejections,
        ttft_p50_ms=_pct(ttft, 50), ttft_p90_ms=_pct(ttft, 90), ttft_p99_ms=_pct(ttft, 99),
        e2e_p50_ms=_pct(e2e, 50), e2e_p90_ms=_pct(e2e, 90), e2e_p99_ms=_pct(e2e, 99),
        e2e_mean_ms=float(e2e.mean()) if len(e2e) else None,
        long_form_e2e_p99_ms=_pct(res.e2e_ms[lf], 99) if mixed else None,
        interactive_ttft_p99_ms=_pct(res.ttft_ms[inter], 99) if mixed else None,
        cache_hit_ratio=float(res.cached_tokens[done].sum()) / max(1, int(prompt[done].sum())),
        imbalance=_max_over_mean(counts),
        work_imbalance=_max_over_mean(work),
        cross_region_share=cross / completed if completed else float("nan"),
        calibration_median_rel_error=rel_error,
        calibration_below_p90=below,
        goodput=_goodput(
            ttft, e2e, res.output_tokens[done].astype(np.float64), len(trace), ttft_ms, itl_ms
        ),
        exploration_share=res.explorations / max(1, len(trace) - res.rejections),
        per_backend_requests={b.name: int(counts[b.index]) for b in run.backends},
        wall_s=run.wall_s,
        warm_ups=res.warm_ups,
        cold_starts=res.cold_starts,
        serverless_warm_share=(
            res.serverless_warm_s / res.serverless_s if res.serverless_s > 0 else None
        ),
    )  # fmt: skip


def _calibration(
    predicted: F64, p90: F64, actual: F64, done: np.ndarray
) -> tuple[float | None, float | None]:
    known = done & ~np.isnan(predicted)
    if not known.any():
        return None, None
    rel = np.abs(predicted[known] - actual[known]) / actual[known]
    with_p90 = known & ~np.isnan(p90)
    below = float((actual[with_p90] <= p90[with_p90]).mean()) if with_p90.any() else None
    return float(np.median(rel)), below


@dataclass(frozen=True, slots=True)
class Comparison:
    """Meridian's policy against the others (ratios > 1: predicted_ttft is better)."""

    p99_vs_round_robin: float | None
    best_baseline: str | None
    p99_vs_best_baseline: float | None
    p99_over_oracle: float | None  # predicted_ttft p99 / oracle p99 (<= 1.15 is the goal)
    cache_vs_oracle: float | None  # predicted_ttft cache-hit ratio / oracle's

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def compare(summaries: Sequence[Summary]) -> Comparison | None:
    by = {s.policy: s for s in summaries}
    ours = by.get("predicted_ttft")
    if ours is None:
        return None
    baselines = [s for s in summaries if is_baseline(s.policy)]
    best = min(baselines, key=lambda s: s.ttft_p99_ms, default=None)
    rr, oracle = by.get("round_robin"), by.get("oracle")
    return Comparison(
        p99_vs_round_robin=rr.ttft_p99_ms / ours.ttft_p99_ms if rr else None,
        best_baseline=best.policy if best else None,
        p99_vs_best_baseline=best.ttft_p99_ms / ours.ttft_p99_ms if best else None,
        p99_over_oracle=ours.ttft_p99_ms / oracle.ttft_p99_ms if oracle else None,
        cache_vs_oracle=(
            ours.cache_hit_ratio / oracle.cache_hit_ratio
            if oracle and oracle.cache_hit_ratio > 0
            else None
        ),
    )
