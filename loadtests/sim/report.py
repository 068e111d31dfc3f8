"""The side-by-side table on the terminal and the JSON file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson

from loadtests.sim.summary import Comparison, Summary

_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("policy", "policy", "{}"),
    ("ttft_p50_ms", "TTFT p50", "{:.0f}"),
    ("ttft_p90_ms", "p90", "{:.0f}"),
    ("ttft_p99_ms", "p99", "{:.0f}"),
    ("e2e_mean_ms", "E2E mean", "{:.0f}"),
    ("e2e_p50_ms", "p50", "{:.0f}"),
    ("e2e_p90_ms", "p90", "{:.0f}"),
    ("e2e_p99_ms", "p99", "{:.0f}"),
    ("cache_hit_ratio", "cache", "{:.1%}"),
    ("imbalance", "imbal", "{:.2f}"),
    ("work_imbalance", "work", "{:.2f}"),
    ("cross_region_share", "x-reg", "{:.1%}"),
    ("rejected", "rej", "{}"),
    ("calibration_median_rel_error", "|err|", "{:.1%}"),
    ("calibration_below_p90", "<p90", "{:.1%}"),
    ("goodput", "good", "{:.1%}"),
    ("exploration_share", "expl", "{:.2%}"),
    ("wall_s", "wall s", "{:.1f}"),
)


def _cell(value: object, fmt: str) -> str:
    if value is None:
        return "-"
    return fmt.format(value)


def table(summaries: Sequence[Summary]) -> str:
    rows = [[title for _, title, _ in _COLUMNS]]
    for s in summaries:
        rows.append([_cell(getattr(s, key), fmt) for key, _, fmt in _COLUMNS])
    widths = [max(len(row[c]) for row in rows) for c in range(len(_COLUMNS))]
    lines = [
        "  ".join(
            cell.ljust(w) if c == 0 else cell.rjust(w)
            for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    mixed = [s for s in summaries if s.long_form_e2e_p99_ms is not None]
    if mixed:
        lines.append("")
        lines.append("mixed traffic: interactive TTFT p99 / long-form end-to-end p99 (ms)")
        for s in mixed:
            lines.append(
                f"  {s.policy:<16} {s.interactive_ttft_p99_ms:>8.0f} {s.long_form_e2e_p99_ms:>9.0f}"
            )
    return "\n".join(lines)


def serverless_lines(summaries: Sequence[Summary]) -> str:
    """What keeping serverless backends warm cost each policy ("" without serverless)."""
    costed = [s for s in summaries if s.serverless_warm_share is not None]
    if not costed:
        return ""
    lines = ["serverless cost: warm-ups sent, cold starts, share of serverless backend-time warm"]
    for s in costed:
        lines.append(
            f"  {s.policy:<16} {s.warm_ups:>6} {s.cold_starts:>6} {s.serverless_warm_share:>7.1%}"
        )
    return "\n".join(lines)


def comparison_lines(comparison: Comparison | None) -> str:
    if comparison is None:
        return ""

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    return "\n".join(
        (
            "predicted_ttft vs the rest (TTFT p99):",
            f"  round_robin / predicted_ttft      {ratio(comparison.p99_vs_round_robin)}",
            f"  best baseline ({comparison.best_baseline}) / predicted_ttft"
            f"  {ratio(comparison.p99_vs_best_baseline)}",
            f"  predicted_ttft / oracle           {ratio(comparison.p99_over_oracle)}",
            f"  cache-hit ratio, predicted_ttft / oracle  {ratio(comparison.cache_vs_oracle)}",
        )
    )


def write_json(
    path: Path,
    scenario: str,
    meta: dict[str, object],
    summaries: Sequence[Summary],
    comparison: Comparison | None,
    slo: dict[str, object] | None = None,
) -> None:
    doc = {
        "scenario": scenario,
        "meta": meta,
        "policies": [s.as_dict() for s in summaries],
        "comparison": None if comparison is None else comparison.as_dict(),
    }
    if slo is not None:
        doc["slo"] = slo
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
