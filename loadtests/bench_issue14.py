"""Every goal of issue 14 in one table, from the shipped simulator scenarios: seconds to leave a
degraded path and to return after it recovers, the median prediction error and the share below
the predicted p90, scenario 3 against round robin, scenario 1 against the oracle, e2e p50/p99
and goodput against the best baseline with the TTFT p99 lead, and the exploration share with
the explored requests past their deadline (definitions: ``loadtests/issue14_goals.py``).

    python -m loadtests.bench_issue14 [--scenarios 1 5] [--seeds 1]
        [--variant NAME:key=value,...] [--acceptance]
        [--markdown docs/results/issue14-goals.md] [--out DIR]

Each scenario (and seed) runs every policy on one trace, as ``meridian sim`` does, so every
ratio is within one run; ``--variant`` adds predicted_ttft runs with policy params laid over
the scenario's own (say ``off:interactive_decode_weight=0,others_decode_weight=0``; a key
``signals.<field>`` varies the scenario's signals instead, say
``private:signals.shared_prefix_delay_s=null``), shown beside the shipped one; the goals judge the shipped configuration. ``--seeds N``: the
scenario's own seed and N-1 more (seed + 10, + 20, ...), judged together: a goal is met only
where it holds on every seed. ``--jobs J`` runs J (scenario, seed) pairs side by side. The simulator is deterministic per
seed, so the numbers do not depend on how busy the machine is. ``--acceptance`` also runs
the acceptance test with real processes (leave / return through the emulator's
``/admin/rtt``, ~40 s) and adds its seconds as rows; without it, its command is printed. Table on stdout, JSON in ``loadtests/results/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from loadtests import issue14_goals as goals
from loadtests.bench_arrivals import shipped
from loadtests.bench_calibration import parse_variant, with_params
from loadtests.results_file import write_results
from loadtests.sim.cli import DEFAULT_POLICIES
from loadtests.sim.loop import simulate
from loadtests.sim.markdown import source_revision
from loadtests.sim.path_events import reactions
from loadtests.sim.report import table
from loadtests.sim.results import PolicyRun
from loadtests.sim.scenario import Scenario, ScenarioError, load_scenario
from loadtests.sim.summary import Summary, summarize
from loadtests.sim.trace import build_trace

ACCEPTANCE = ".venv/bin/pytest -q -s tests/acceptance/test_learning_both_ways.py"
ACCEPTANCE_TEST = "tests/acceptance/test_learning_both_ways.py"


def run_acceptance() -> list[goals.GoalRow]:
    """The real-process acceptance test (emulators, gateway, probes: ~40 s), its printed
    seconds as goal rows; a failing test is a missed row."""
    argv = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", ACCEPTANCE_TEST]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    rows = goals.acceptance_rows(done.stdout, ACCEPTANCE)
    if done.returncode != 0 or not rows:
        tail = (done.stdout.strip().splitlines() or ["no output"])[-1]
        rows.append(goals.GoalRow("acceptance test passes", "acceptance", tail, False, ACCEPTANCE))
    return rows


def explored_deadlines(run: PolicyRun, scenario: Scenario) -> goals.ExploredDeadlines:
    """Explored requests past their own first-token deadline (the goal), and past the joint
    objective's TTFT (every request, with a deadline or not: informational)."""
    res = run.results
    served = ~np.isnan(res.ttft_ms)
    explored = res.explored & served
    with_deadline = served & ~np.isnan(res.deadline_ms)
    late = with_deadline & (res.ttft_ms > np.where(with_deadline, res.deadline_ms, 0.0))
    slow = served & (res.ttft_ms > scenario.objective.ttft_ms)
    return goals.ExploredDeadlines(
        explored=int(explored.sum()),
        with_deadline=int((explored & with_deadline).sum()),
        late=int((explored & late).sum()),
        past_objective=int((explored & slow).sum()),
        past_objective_share=float(slow.sum()) / max(int(served.sum()), 1),
    )


SIGNALS_KEY = "signals."


def variant_scenario(scenario: Scenario, params: dict[str, Any]) -> Scenario:
    """``scenario`` with a variant's params laid over predicted_ttft's, and its
    ``signals.<field>`` keys over the scenario's signals (say
    ``signals.shared_prefix_delay_s=null``: gateways that keep their prefixes to themselves)."""
    signals = {
        k.removeprefix(SIGNALS_KEY): v for k, v in params.items() if k.startswith(SIGNALS_KEY)
    }
    policy = {k: v for k, v in params.items() if not k.startswith(SIGNALS_KEY)}
    varied = with_params(scenario, policy, scenario.seed)
    if not signals:
        return varied
    merged = scenario.signals.model_validate({**scenario.signals.model_dump(), **signals})
    return varied.model_copy(update={"signals": merged})


def run_scenario(
    scenario: Scenario, variants: list[tuple[str, dict[str, Any]]]
) -> tuple[list[Summary], PolicyRun]:
    """Every policy (and each predicted_ttft variant, as ``[name]``) on one trace."""
    trace = build_trace(scenario, None)
    goal = scenario.objective
    summaries: list[Summary] = []
    ours: PolicyRun | None = None
    for policy in DEFAULT_POLICIES:
        started = time.perf_counter()
        run = simulate(scenario, trace, policy)
        run = dataclasses.replace(run, wall_s=time.perf_counter() - started)
        summaries.append(summarize(run, trace, goal.ttft_ms, goal.itl_ms))
        print(f"  {policy}: {time.perf_counter() - started:.1f} s", flush=True)
        ours = run if policy == goals.OURS else ours
    for name, params in variants:
        run = simulate(variant_scenario(scenario, params), trace, goals.OURS)
        summary = summarize(run, trace, goal.ttft_ms, goal.itl_ms)
        summaries.append(dataclasses.replace(summary, policy=f"[{name}]"))
    if ours is None:
        raise SystemExit(f"{goals.OURS} is not among the simulator's policies")
    return summaries, ours


def goal_rows(
    file: str, number: str, scenario: Scenario, summaries: list[Summary], ours: PolicyRun
) -> list[goals.GoalRow]:
    policies = [s for s in summaries if not s.policy.startswith("[")]
    rows = goals.path_rows(file, reactions(ours, scenario), scenario.signals.probe_interval_s)
    rows += goals.versus_rows(file, number, policies)
    for row in (
        goals.error_row(file, policies),
        goals.e2e_row(file, policies),
        goals.exploration_row(file, policies, explored_deadlines(ours, scenario)),
    ):
        if row is not None:
            rows.append(row)
    return rows


def _cell(text: str) -> str:
    """``text`` inside a markdown table cell (a bare ``|`` would end the cell)."""
    return text.replace("|", "\\|")


def reproduce(argv: list[str]) -> str:
    """The command line without where it wrote (which says nothing of the results)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip or arg in ("--out", "--markdown"):
            skip = not skip
        else:
            kept.append(arg)
    return " ".join(["python -m loadtests.bench_issue14", *kept])


def _markdown(
    rows: list[goals.GoalRow],
    verdicts: list[goals.GoalRow],
    tables: list[str],
    command: str,
    seeds: int,
) -> str:
    mark = {True: "met", False: "**missed**", None: "-"}

    def goal_table(found: list[goals.GoalRow]) -> list[str]:
        return [
            "| goal | scenario | | measured |",
            "|---|---|---|---|",
            *(f"| {_cell(r.goal)} | {r.scenario} | {mark[r.met]} | {_cell(r.measured)} |"
              for r in found),
        ]  # fmt: skip

    lines = [
        "# Issue 14: every goal, measured",
        "",
        f"- code: `{source_revision()}`",
        f"- command: `{command}`",
        "- definitions: `loadtests/issue14_goals.py`; the simulator is deterministic per seed",
        "- baselines: every policy but predicted_ttft, the oracle (it knows what no gateway"
        " can) and slo_cost, which is Meridian's own policy, not a baseline: predicted_ttft's"
        " predictor plus a cost objective, falling back to exactly predicted_ttft's choice when"
        " no candidate meets the objective. All three stay in every table below.",
        f"- with real processes (rows 'acceptance', with `--acceptance`): `{ACCEPTANCE}`",
        "",
    ]
    if seeds > 1:
        lines += [
            f"## Over {seeds} seeds: a goal is met only where it holds on every seed",
            "",
            *goal_table(verdicts),
            "",
            "## Every seed",
            "",
        ]
    lines += goal_table(rows)
    lines += ["", "Every policy, per scenario (`meridian sim` columns):", ""]
    lines += [f"```\n{text}\n```\n" for text in tables]
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True, slots=True)
class SeedRun:
    """One scenario on one seed: its goal rows, its policy table and its JSON."""

    file: str
    rows: list[goals.GoalRow]
    table: str
    payload: dict[str, Any]


def run_seed(path: Path, k: int, variants: list[tuple[str, dict[str, Any]]]) -> SeedRun:
    """Scenario ``path`` on its own seed + 10 k (a process pool's job: top level, picklable)."""
    loaded = load_scenario(path)
    if isinstance(loaded, ScenarioError):
        raise SystemExit(loaded.message)
    scenario = loaded.model_copy(update={"seed": loaded.seed + 10 * k})
    label = path.name if k == 0 else f"{path.name} seed {scenario.seed}"
    print(f"{label}:", flush=True)
    summaries, ours = run_scenario(scenario, variants)
    number = path.name.split("-", 1)[0]
    found = goal_rows(label, number, scenario, summaries, ours)
    if k:  # meridian sim runs a scenario's own seed only
        again = f"python -m loadtests.bench_issue14 --scenarios {number} --seeds {k + 1}"
        found = [dataclasses.replace(row, command=again) for row in found]
    payload = {
        "scenario": path.name,
        "seed": scenario.seed,
        "summaries": [s.as_dict() for s in summaries],
        "goals": [r.as_dict() for r in found],
    }
    return SeedRun(path.name, found, f"{label}\n{table(summaries)}", payload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="*", help="scenario numbers (default: all)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per scenario")
    parser.add_argument("--variant", action="append", help="NAME:key=value,... (repeatable)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="(scenario, seed) runs side by side, one process each"
    )
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    parser.add_argument(
        "--acceptance", action="store_true", help=f"also run {ACCEPTANCE_TEST} (real processes)"
    )
    parser.add_argument("--out", type=Path, default=Path("loadtests/results"))
    args = parser.parse_args(argv)
    variants = [parse_variant(v) for v in args.variant or ()]
    pairs = [(path, k) for path in shipped(args.scenarios) for k in range(args.seeds)]
    # Each (scenario, seed) is deterministic and independent: run them side by side, kept in
    # order. Progress lines of parallel runs interleave; the tables print in order below.
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        jobs = [pool.submit(run_seed, path, k, variants) for path, k in pairs]
        done = [job.result() for job in jobs]
    rows = [row for seeded in done for row in seeded.rows]
    tables = [seeded.table for seeded in done]
    for text in tables:
        print(text, flush=True)
    payload = [seeded.payload for seeded in done]
    verdicts = goals.over_seeds([(seeded.file, seeded.rows) for seeded in done])
    if args.acceptance:  # real processes, once: the same rows in both tables
        measured = run_acceptance()
        rows += measured
        verdicts += measured
    print()
    print(goals.table(rows))
    if args.seeds > 1:
        print()
        print(goals.table(verdicts))
    if not args.acceptance:
        print(f"  {ACCEPTANCE}  (real processes, --acceptance: leave / return via the emulator)")
    write_results(args.out, "bench-issue14", {"variants": dict(variants), "runs": payload})
    if args.markdown is not None:
        command = reproduce(sys.argv[1:] if argv is None else argv)
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(_markdown(rows, verdicts, tables, command, args.seeds))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
