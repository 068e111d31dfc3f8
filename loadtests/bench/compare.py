"""``meridian bench compare A.json B.json``: two reports side by side with ratios B/A."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

LATENCIES = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
QUANTILE_KEYS = ("p50", "p90", "p99", "max")
SCALARS = (
    "requests",
    "ok",
    "request_per_s",
    "output_tokens_per_s",
    "input_tokens_per_s",
    "cached_tokens",
)


class CompareError(Exception):
    """A report that cannot be compared; the message names the file and what is wrong."""


def load_report(path: Path) -> dict[str, Any]:
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as error:
        raise CompareError(f"{path}: cannot read: {error.strerror}") from None
    except orjson.JSONDecodeError as error:
        raise CompareError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, dict) or "ttft_ms" not in data:
        raise CompareError(f"{path}: not a bench report.json (no 'ttft_ms' key)")
    return data


def metric_rows(report: Mapping[str, Any]) -> dict[str, float | None]:
    rows: dict[str, float | None] = {}
    for name in SCALARS:
        rows[name] = report.get(name)
    rows["errors"] = float(sum((report.get("errors") or {}).values()))
    goodput = report.get("goodput") or {}
    rows["goodput_fraction"] = goodput.get("fraction")
    rows["goodput_per_s"] = goodput.get("per_s")
    for latency in LATENCIES:
        dist = report.get(latency) or {}
        for key in QUANTILE_KEYS:
            rows[f"{latency.removesuffix('_ms')} {key} (ms)"] = dist.get(key)
    return rows


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def format_comparison(
    a: Mapping[str, Any], b: Mapping[str, Any], label_a: str, label_b: str
) -> str:
    rows_a, rows_b = metric_rows(a), metric_rows(b)
    width = max(len(label_a), len(label_b), 12)
    lines = [f"{'metric':<26}{label_a[:width]:>{width}}  {label_b[:width]:>{width}}  {'B/A':>8}"]
    for name, value_a in rows_a.items():
        value_b = rows_b.get(name)
        ratio = "-"
        if value_a is not None and value_b is not None and value_a != 0:
            ratio = f"{value_b / value_a:.3f}"
        lines.append(f"{name:<26}{_cell(value_a):>{width}}  {_cell(value_b):>{width}}  {ratio:>8}")
    return "\n".join(lines)
