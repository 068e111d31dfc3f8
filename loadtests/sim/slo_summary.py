"""Objectives, deadlines and spend of every run, side by side, and the two comparisons issue 17
asks for (docs/slo.md).

Definitions:
- spend: per-token price of what each completed request used (its prompt less what the engine
  had cached, the cached part, its output), summed.
- objective attainment: requests with a TTFT objective whose TTFT was within it / all requests
  with one (a request that was never served did not meet it).
- late among admitted: of the requests with a deadline that were served, those whose TTFT
  passed it.
- refused: early rejections ("<policy>+reject" runs), as a share of all requests.
- false rejections, two counterfactuals, both as a share of all requests:
  ``marginal`` — refused, though sending it to the chosen backend right then would have met the
  deadline (the oracle's closed-form truth, everything else as it was);
  ``vs baseline`` — refused, though the same request met its deadline in the run of the same
  policy without early rejection.
- slo_cost against predicted_ttft: of the requests predicted_ttft met the objective for, the
  share slo_cost met it for too (the same trace, request by request), and spend / spend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from loadtests.sim.loop import REJECT_SUFFIX
from loadtests.sim.results import PolicyRun, ResultColumns

Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class SloSummary:
    policy: str
    spend: float
    objective_requests: int
    objective_attainment: float | None
    deadline_requests: int
    late_admitted_share: float | None
    refused_share: float
    false_rejection_marginal: float
    false_rejection_vs_baseline: float | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def met_objective(res: ResultColumns) -> Mask:
    with_objective = ~np.isnan(res.objective_ms)
    return with_objective & (res.ttft_ms <= np.where(with_objective, res.objective_ms, 0.0))


def met_deadline(res: ResultColumns) -> Mask:
    with_deadline = ~np.isnan(res.deadline_ms)
    return with_deadline & (res.ttft_ms <= np.where(with_deadline, res.deadline_ms, 0.0))


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def summarize_slo(run: PolicyRun, baseline: PolicyRun | None) -> SloSummary:
    res = run.results
    total = len(res.ttft_ms)
    objective = int((~np.isnan(res.objective_ms)).sum())
    with_deadline = ~np.isnan(res.deadline_ms)
    admitted = with_deadline & ~np.isnan(res.ttft_ms)
    late = int((admitted & ~met_deadline(res)).sum())
    refused = int(res.refused.sum())
    versus = None
    if baseline is not None:
        versus = int((res.refused & met_deadline(baseline.results)).sum()) / max(total, 1)
    return SloSummary(
        policy=run.policy,
        spend=float(res.cost.sum()),
        objective_requests=objective,
        objective_attainment=_share(int(met_objective(res).sum()), objective),
        deadline_requests=int(with_deadline.sum()),
        late_admitted_share=_share(late, int(admitted.sum())),
        refused_share=refused / max(total, 1),
        false_rejection_marginal=int((res.refused & res.would_meet).sum()) / max(total, 1),
        false_rejection_vs_baseline=versus,
    )


def summarize_all(runs: Sequence[PolicyRun]) -> list[SloSummary]:
    by = {run.policy: run for run in runs}
    return [
        summarize_slo(run, by.get(run.policy.removesuffix(REJECT_SUFFIX)))
        if run.policy.endswith(REJECT_SUFFIX)
        else summarize_slo(run, None)
        for run in runs
    ]


def relevant(runs: Sequence[PolicyRun]) -> bool:
    """Whether the scenario has any objective, deadline or price to report on."""
    return any(
        not np.isnan(r.results.objective_ms).all()
        or not np.isnan(r.results.deadline_ms).all()
        or bool(r.results.cost.any())
        for r in runs
    )


def slo_cost_vs_predicted(runs: Sequence[PolicyRun]) -> dict[str, float] | None:
    by = {run.policy: run for run in runs}
    ours, fastest = by.get("slo_cost"), by.get("predicted_ttft")
    if ours is None or fastest is None:
        return None
    met_fastest = met_objective(fastest.results)
    both = int((met_fastest & met_objective(ours.results)).sum())
    fastest_spend = float(fastest.results.cost.sum())
    return {
        "kept_of_predicted_ttft_met": both / max(int(met_fastest.sum()), 1),
        "spend_ratio": float(ours.results.cost.sum()) / fastest_spend if fastest_spend else 1.0,
    }


def rejection_vs_baseline(runs: Sequence[PolicyRun]) -> dict[str, dict[str, float | None]]:
    """Per '+reject' run: baseline late share / its late share (the cut, higher is better)."""
    summaries = {s.policy: s for s in summarize_all(runs)}
    out: dict[str, dict[str, float | None]] = {}
    for name, summary in summaries.items():
        base = summaries.get(name.removesuffix(REJECT_SUFFIX))
        if not name.endswith(REJECT_SUFFIX) or base is None:
            continue
        mine, theirs = summary.late_admitted_share, base.late_admitted_share
        cut = None
        if mine is not None and theirs is not None:
            cut = theirs / mine if mine > 0 else float("inf")
        out[name] = {
            "late_admitted_cut": cut,
            "false_rejection_marginal": summary.false_rejection_marginal,
            "false_rejection_vs_baseline": summary.false_rejection_vs_baseline,
        }
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def slo_table(summaries: Sequence[SloSummary]) -> str:
    head = ("policy", "spend", "SLO met", "late adm", "refused", "false rej", "vs base")
    rows = [head] + [
        (
            s.policy,
            f"{s.spend:.4f}",
            _pct(s.objective_attainment),
            _pct(s.late_admitted_share),
            _pct(s.refused_share),
            _pct(s.false_rejection_marginal),
            _pct(s.false_rejection_vs_baseline),
        )
        for s in summaries
    ]
    widths = [max(len(row[c]) for row in rows) for c in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in
                  enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]  # fmt: skip
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def comparison_text(
    cost: Mapping[str, float] | None, rejection: Mapping[str, Mapping[str, float | None]]
) -> str:
    lines = []
    if cost is not None:
        lines.append(
            f"slo_cost vs predicted_ttft: meets the objective for "
            f"{cost['kept_of_predicted_ttft_met']:.1%} of the requests predicted_ttft meets it "
            f"for, at {cost['spend_ratio']:.2f}x the spend ({1 - cost['spend_ratio']:.0%} lower)"
        )
    for name, numbers in rejection.items():
        cut = numbers["late_admitted_cut"]
        lines.append(
            f"{name} vs {name.removesuffix(REJECT_SUFFIX)}: late among admitted cut "
            + ("-" if cut is None else f"{cut:.1f}x")
            + f", false rejections {_pct(numbers['false_rejection_marginal'])} (marginal), "
            f"{_pct(numbers['false_rejection_vs_baseline'])} (vs baseline run)"
        )
    return "\n".join(lines)


def slo_report(runs: Sequence[PolicyRun]) -> tuple[str, dict[str, object]] | None:
    """The objectives-and-spend table with its comparisons, and the same as JSON (None: the
    scenario has no objective, deadline or price)."""
    if not relevant(runs):
        return None
    summaries = summarize_all(runs)
    cost, rejection = slo_cost_vs_predicted(runs), rejection_vs_baseline(runs)
    text = slo_table(summaries)
    comparisons = comparison_text(cost, rejection)
    if comparisons:
        text += "\n\n" + comparisons
    doc: dict[str, object] = {
        "policies": [s.as_dict() for s in summaries],
        "slo_cost_vs_predicted_ttft": cost,
        "early_rejection": rejection,
    }
    return text, doc
