"""A run's results as a markdown page (committed under ``docs/results/``), naming the code.

The page records the git commit the results came from (and whether routing/ or loadtests/
had uncommitted changes), because a table without the code that made it cannot be checked.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from loadtests.sim.report import comparison_lines, table
from loadtests.sim.summary import Comparison, Summary

SOURCE_ROOT = Path(__file__).resolve().parents[2]


def source_revision(root: Path = SOURCE_ROOT) -> str:
    """``<commit>`` of the code being run, ``+ uncommitted changes`` when routing/ or
    loadtests/ differ from it; ``unknown`` outside a git checkout."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "routing", "loadtests"],
            cwd=root, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + (" + uncommitted changes in routing/ or loadtests/" if dirty else "")


def results_page(
    scenario: str,
    description: str,
    command: str,
    meta: Mapping[str, object],
    summaries: Sequence[Summary],
    comparison: Comparison | None,
    revision: str,
    slo: str = "",
) -> str:
    facts = ", ".join(
        f"{key} {value:.1f}" if isinstance(value, float) else f"{key} {value}"
        for key, value in meta.items()
        if key != "trace_build_s"
    )
    parts = [
        f"# Simulator results: {scenario}",
        "",
        description,
        "",
        f"- code: `{revision}`",
        f"- command: `{command}`",
        f"- run: {facts}",
        "- times in ms; definitions in `loadtests/sim/summary.py`; `wall s` is this machine's "
        "(2 shared cores), not a property of the policy",
        "",
        "```",
        table(summaries),
        "```",
    ]
    lines = comparison_lines(comparison)
    if lines:
        parts += ["", "```", lines, "```"]
    if slo:
        parts += ["", "Objectives, deadlines and spend (`loadtests/sim/slo_summary.py`):", ""]
        parts += ["```", slo, "```"]
    return "\n".join(parts) + "\n"
