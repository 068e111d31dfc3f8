"""Where in time a policy wins or loses: one simulator scenario, several policies, their requests
cut into windows of arrival time, and per window the numbers a whole-run table averages away.

    python -m loadtests.sim_windows loadtests/scenarios/5-path-degrades-and-recovers.yaml
        [--policies predicted_ttft,least_loaded] [--seed-offset K] [--every S]
        [--variant NAME:key=value,...] [--out loadtests/results]

Windows start and end at the scenario's timed events (a path that degrades at 42 s and recovers
at 57 s gives [0, 42), [42, 57), [57, ...)), or every ``--every`` seconds. Per window and policy:
requests that arrived in it, e2e p50 / p99, TTFT p50 / mean / p99, ITL weighted by tokens (a
long answer's ITL counts per token it waited for) and each backend's share of the window's
requests. ``--variant`` adds predicted_ttft with those params laid over the scenario's (as
``bench_issue14 --variant``), shown as ``[NAME]``. Seeds are the scenario's own plus
10 x ``--seed-offset`` (``bench_issue14 --seeds``' numbering). Why it exists: a whole-run e2e p50
that misses by 0.5% can be a policy that wins every quiet window and loses one degraded spell,
which a different setting cannot fix without paying for it in another column
(docs/results/issue14-goals.md, "the trade").
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.bench_calibration import parse_variant
from loadtests.bench_issue14 import variant_scenario
from loadtests.results_file import write_results
from loadtests.sim.loop import simulate
from loadtests.sim.results import PolicyRun
from loadtests.sim.scenario import Scenario, ScenarioError, load_scenario
from loadtests.sim.trace import build_trace

OURS = "predicted_ttft"


def boundaries(scenario: Scenario, every_s: float | None = None) -> list[float]:
    """Window edges from 0 to the run's end: every ``every_s`` seconds, or else each timed
    event's start and end that fall inside the run."""
    end = float(scenario.duration_s)
    if every_s is not None:
        count = math.ceil(end / every_s)
        return [min(k * every_s, end) for k in range(count + 1)]
    inside = {
        float(edge)
        for event in scenario.events
        for edge in (event.start_s, event.end_s)
        if 0.0 < edge < end
    }
    return [0.0, *sorted(inside), end]


@dataclass(frozen=True, slots=True)
class Window:
    """One policy's requests that arrived in [start, end)."""

    policy: str
    start_s: float
    end_s: float
    requests: int
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    ttft_p50_ms: float | None
    ttft_mean_ms: float | None
    ttft_p99_ms: float | None
    itl_ms: float | None  # token-weighted
    shares: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def windows(run: PolicyRun, edges: Sequence[float], policy: str) -> list[Window]:
    """``run``'s completed requests, by arrival, in the windows between ``edges``."""
    r = run.results
    done = ~np.isnan(r.ttft_ms)
    names = [backend.name for backend in run.backends]
    found: list[Window] = []
    for start, end in itertools.pairwise(edges):
        mask = done & (r.arrived_at >= start) & (r.arrived_at < end)
        ttft, e2e, tokens = r.ttft_ms[mask], r.e2e_ms[mask], r.output_tokens[mask]
        chosen = r.backend[mask]
        if not len(ttft):
            found.append(Window(policy, start, end, 0, None, None, None, None, None, None, {}))
            continue
        # An answer of n tokens waited n - 1 gaps after its first token.
        gaps = np.maximum(tokens - 1, 0)
        itl = float((e2e - ttft).sum() / gaps.sum()) if gaps.sum() else None
        counts = np.bincount(chosen, minlength=len(names))
        shares = {name: float(counts[i] / len(chosen)) for i, name in enumerate(names)}
        found.append(
            Window(
                policy, start, end, len(ttft),
                float(np.percentile(e2e, 50)), float(np.percentile(e2e, 99)),
                float(np.percentile(ttft, 50)), float(ttft.mean()), float(np.percentile(ttft, 99)),
                itl, shares,
            )
        )  # fmt: skip
    return found


def _cell(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(found: Sequence[Window], backends: Sequence[str]) -> str:
    """One row per window and policy, windows in time order."""
    short = [name.replace("-dedicated", "").replace("-serverless", "-sl") for name in backends]
    head = (
        f"{'window s':>11} {'policy':<22} {'n':>5} {'e2e p50':>8} {'p99':>6} "
        f"{'TTFT p50':>8} {'mean':>6} {'p99':>6} {'ITL':>6}  share: " + " ".join(short)
    )
    lines = [head, "-" * len(head)]
    for w in sorted(found, key=lambda w: w.start_s):
        share = " ".join(
            f"{100 * w.shares.get(name, 0.0):>{len(label)}.0f}"
            for name, label in zip(backends, short, strict=True)
        )
        lines.append(
            f"{w.start_s:>5.0f}-{w.end_s:<5.0f} {w.policy:<22} {w.requests:>5} "
            f"{_cell(w.e2e_p50_ms):>8} {_cell(w.e2e_p99_ms):>6} {_cell(w.ttft_p50_ms):>8} "
            f"{_cell(w.ttft_mean_ms):>6} {_cell(w.ttft_p99_ms):>6} {_cell(w.itl_ms, 2):>6}  "
            f"share: {share}"
        )
    return "\n".join(lines)


def run_windows(
    scenario: Scenario,
    policies: Sequence[str],
    variants: Sequence[tuple[str, dict[str, Any]]],
    edges: Sequence[float],
    requests: int | None = None,
) -> tuple[list[Window], list[str]]:
    """Every policy (and variant) on one trace, cut at ``edges``; also the backends' names."""
    trace = build_trace(scenario, requests)
    found: list[Window] = []
    names: list[str] = []
    runs = [(policy, scenario, policy) for policy in policies]
    runs += [(f"[{name}]", variant_scenario(scenario, params), OURS) for name, params in variants]
    for label, varied, policy in runs:
        run = simulate(varied, trace, policy)
        names = [backend.name for backend in run.backends]
        found += windows(run, edges, label)
    return found, names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--policies", default=f"{OURS},least_loaded,round_robin,latency_ewma")
    parser.add_argument("--seed-offset", type=int, default=0, help="seed + 10 x this")
    parser.add_argument("--every", type=float, help="windows of this many seconds instead")
    parser.add_argument("--requests", type=int, help="trace length (default: the duration's)")
    parser.add_argument("--variant", action="append", help="NAME:key=value,... (repeatable)")
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    if args.every is not None and args.every <= 0:
        parser.error("--every: must be > 0")
    loaded = load_scenario(args.scenario)
    if isinstance(loaded, ScenarioError):
        raise SystemExit(loaded.message)
    scenario = loaded.model_copy(update={"seed": loaded.seed + 10 * args.seed_offset})
    edges = boundaries(scenario, args.every)
    variants = [parse_variant(text) for text in args.variant or ()]
    policies = [p for p in args.policies.split(",") if p]
    found, names = run_windows(scenario, policies, variants, edges, args.requests)
    print(f"{scenario.name}, seed {scenario.seed}: windows {edges}")
    print(table(found, names))
    write_results(
        args.out,
        "sim-windows",
        {"scenario": str(args.scenario), "seed": scenario.seed, "edges": edges,
         "windows": [w.as_dict() for w in found]},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
