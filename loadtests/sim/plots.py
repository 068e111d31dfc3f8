"""PNG plots: TTFT CDF per policy, and per-backend load bars (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from loadtests.sim.results import PolicyRun
from loadtests.sim.summary import Summary


def ttft_cdf(runs: Sequence[PolicyRun], path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    for run in runs:
        ttft = np.sort(run.results.ttft_ms[~np.isnan(run.results.ttft_ms)])
        if len(ttft):
            ax.plot(ttft, np.arange(1, len(ttft) + 1) / len(ttft), label=run.policy)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms, log scale)")
    ax.set_ylabel("share of requests")
    ax.set_title(f"{title}: TTFT CDF per policy")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_bars(summaries: Sequence[Summary], path: Path, title: str) -> None:
    count = len(summaries)
    fig, axes = plt.subplots(count, 1, figsize=(10, 1.6 * count + 1), sharex=True, squeeze=False)
    for ax, summary in zip(axes[:, 0], summaries, strict=True):
        names = list(summary.per_backend_requests)
        ax.bar(range(len(names)), list(summary.per_backend_requests.values()), width=0.8)
        ax.set_ylabel(summary.policy, rotation=0, ha="right", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    names = list(summaries[0].per_backend_requests) if summaries else []
    bottom = axes[-1, 0]
    if len(names) <= 60:
        bottom.set_xticks(range(len(names)))
        bottom.set_xticklabels(names, rotation=90, fontsize=6)
    else:
        bottom.set_xlabel("backend index")
    fig.suptitle(f"{title}: requests served per backend")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
