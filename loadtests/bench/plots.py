"""PNG plots of a run (matplotlib, Agg backend: no display needed): TTFT and ITL CDFs and a
latency timeline (TTFT and end-to-end of each request against when it was sent)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported: no display on servers

import matplotlib.pyplot as plt
import numpy as np

from loadtests.bench.records import BenchResult
from loadtests.bench.stats import flatten

PLOT_FILES = ("ttft_cdf.png", "itl_cdf.png", "timeline.png")


def _cdf(values_ms: Sequence[float], title: str, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(7, 4.5))
    if len(values_ms):
        ordered = np.sort(np.asarray(values_ms, dtype=np.float64))
        axes.plot(ordered, np.arange(1, ordered.size + 1) / ordered.size, drawstyle="steps-post")
        for q in (50, 99):
            axes.axvline(float(np.percentile(ordered, q)), linestyle=":", color="grey")
    axes.set_xlabel("milliseconds")
    axes.set_ylabel("fraction of samples")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _timeline(result: BenchResult, path: Path) -> None:
    ok = [r for r in result.records if r.ok and r.ttft_s is not None]
    failed = [r for r in result.records if not r.ok]
    figure, axes = plt.subplots(figsize=(9, 4.5))
    sent = [r.sent_s for r in ok]
    axes.scatter(sent, [(r.e2e_s or 0) * 1000 for r in ok], s=4, label="end-to-end")
    axes.scatter(sent, [(r.ttft_s or 0) * 1000 for r in ok], s=4, label="TTFT")
    if failed:
        axes.scatter([r.sent_s for r in failed], [0] * len(failed), marker="x", label="error")
    axes.set_xlabel("seconds since start (request sent)")
    axes.set_ylabel("milliseconds")
    axes.set_yscale("symlog", linthresh=10)
    axes.set_title(f"latency timeline: {result.workload}")
    axes.legend(loc="upper left")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_plots(result: BenchResult, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    ok = [r for r in result.records if r.ok]
    ttft_ms = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
    itl_ms = (flatten(r.itl_gaps_s for r in ok) * 1000).tolist()
    paths = [out_dir / name for name in PLOT_FILES]
    _cdf(ttft_ms, f"TTFT CDF: {result.workload} (p50, p99 dotted)", paths[0])
    _cdf(itl_ms, f"inter-token latency CDF: {result.workload} (p50, p99 dotted)", paths[1])
    _timeline(result, paths[2])
    return paths
