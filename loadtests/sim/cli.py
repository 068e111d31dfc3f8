"""``meridian sim SCENARIO.yaml [--policies a,b] [--out DIR] [--requests N]``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from loadtests.sim import replay_cli
from loadtests.sim.loop import REJECT_SUFFIX
from loadtests.sim.markdown import results_page, source_revision
from loadtests.sim.path_events import reactions
from loadtests.sim.replay_trace import ReplayTrace
from loadtests.sim.report import comparison_lines, serverless_lines, table, write_json
from loadtests.sim.results import PolicyRun
from loadtests.sim.scenario import ScenarioError, load_scenario
from loadtests.sim.slo_summary import slo_report
from loadtests.sim.summary import Summary, compare, summarize
from loadtests.sim.trace import Trace, build_trace
from routing.policies import POLICIES, SIMULATION_ONLY

DEFAULT_POLICIES = ("predicted_ttft", *sorted(set(POLICIES) - {"predicted_ttft"}), *SIMULATION_ONLY)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meridian sim", description="replay one seeded trace per routing policy"
    )
    parser.add_argument(
        "scenario", type=Path, nargs="?", help="scenario YAML (loadtests/scenarios/)"
    )
    parser.add_argument(
        "--policies",
        default=",".join(DEFAULT_POLICIES),
        help="comma-separated policy names; '<policy>+reject' adds early rejection",
    )
    parser.add_argument("--out", type=Path, default=None, help="directory for JSON and PNGs")
    parser.add_argument(
        "--requests", type=int, default=None, help="trace length (default: the scenario's duration)"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--markdown", type=Path, default=None, help="also write the table as markdown here"
    )
    parser.add_argument(
        "--revision", default=None, help="code revision for --markdown (default: from git)"
    )
    replay_cli.add_arguments(parser)
    return parser


def _policies(raw: str) -> list[str] | str:
    names = [name.strip() for name in raw.split(",") if name.strip()]
    known = set(POLICIES) | set(SIMULATION_ONLY)
    unknown = [name for name in names if name.removesuffix(REJECT_SUFFIX) not in known]
    if unknown or not names:
        return f"--policies: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(sorted(known))}"
    return names


def _reproduce_command(argv: list[str]) -> str:
    """The command line without where it wrote its output (which says nothing of the results)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--out", "--markdown", "--revision"):
            skip = True
        elif not arg.startswith(("--out=", "--markdown=", "--revision=")):
            kept.append(arg)
    return " ".join(["meridian sim", *kept])


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(argv) if argv is not None else None)
    policies = _policies(args.policies)
    if isinstance(policies, str):
        print(policies, file=sys.stderr)
        return 2
    if args.requests is not None and args.requests < 1:
        print("--requests: must be >= 1", file=sys.stderr)
        return 2
    if (args.scenario is None) == (args.replay is None):
        print("give a scenario file or --replay FILE (one of them)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    recorded_policy: str | None = None
    trace: Trace
    if args.replay is not None:
        replayed = replay_cli.load(args)
        if isinstance(replayed, str):
            print(replayed, file=sys.stderr)
            return 2
        scenario, trace, recorded_policy = replayed
    else:
        loaded = load_scenario(args.scenario)
        if isinstance(loaded, ScenarioError):
            print(loaded.message, file=sys.stderr)
            return 2
        scenario = loaded
        trace = build_trace(scenario, args.requests)
    trace_s = time.perf_counter() - started
    backends = sum(group.count for group in scenario.backends)
    print(
        f"scenario {scenario.name}: {len(trace)} requests over {trace.span_s:.0f} s, "
        f"{backends} backends, {len(trace.gateways)} gateways "
        f"(arrivals drawn in {trace_s:.1f} s; requests are generated lazily on each policy's pass)",
        flush=True,
    )
    runs: list[PolicyRun] = []
    summaries: list[Summary] = []
    for policy in policies:
        started = time.perf_counter()
        run = replay_cli.run(scenario, trace, policy, args)
        run = dataclasses.replace(run, wall_s=time.perf_counter() - started)
        runs.append(run)
        goal = scenario.objective
        summaries.append(summarize(run, trace, goal.ttft_ms, goal.itl_ms))
        print(f"  {policy}: {run.wall_s:.1f} s", flush=True)
    comparison = compare(summaries)
    print()
    print(table(summaries))
    print()
    print(comparison_lines(comparison))
    paths = {run.policy: reactions(run, scenario) for run in runs}
    path_text = ""
    if any(paths.values()):
        path_text = (
            "path events (seconds to leave: <= 10% of the share left; to return: >= 50% back):\n"
        )
        path_text += "\n".join(
            f"  {policy:<15} {reaction.line()}"
            for policy, found in paths.items()
            for reaction in found
        )
        print("\n" + path_text)
    serverless = serverless_lines(summaries)
    if serverless:
        print("\n" + serverless)
    slo = slo_report(runs)
    if slo is not None:
        print("\nobjectives, deadlines and spend (definitions: loadtests/sim/slo_summary.py)")
        print(slo[0])
    extra = "\n\n".join(
        text for text in (path_text, serverless, "" if slo is None else slo[0]) if text
    )
    if isinstance(trace, ReplayTrace):
        versus = replay_cli.recorded_versus(
            trace.file, scenario, summaries, recorded_policy, runs, replay_cli.compared_from(args)
        )
        print("\n" + versus)
        extra = versus + ("\n\n" + extra if extra else "")
    out = args.out or Path("loadtests/results") / f"sim-{scenario.name}"
    out.mkdir(parents=True, exist_ok=True)
    meta: dict[str, object] = {
        "requests": len(trace),
        "backends": backends,
        "gateways": len(trace.gateways),
        "span_s": trace.span_s,
        "trace_build_s": trace_s,
        "seed": scenario.seed,
        "background_requests": len(trace.background),
    }
    events = {p: [r.as_dict() for r in found] for p, found in paths.items() if found}
    meta_json = {**meta, "path_events": events} if events else meta
    write_json(
        out / "results.json", scenario.name, meta_json, summaries, comparison, slo and slo[1]
    )
    if not args.no_plots:
        # Imported here: matplotlib is ~0.4 s of a run's start, which --no-plots never needs.
        from loadtests.sim.plots import load_bars, ttft_cdf

        ttft_cdf(runs, out / "ttft_cdf.png", scenario.name)
        load_bars(summaries, out / "backend_load.png", scenario.name)
    print(f"\nwrote {out}/results.json" + ("" if args.no_plots else " and PNG plots"))
    if args.markdown is not None:
        command = _reproduce_command(list(argv) if argv is not None else sys.argv[1:])
        page = results_page(
            scenario.name, scenario.description, command, meta, summaries, comparison,
            args.revision or source_revision(), extra,
        )  # fmt: skip
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(page)
        print(f"wrote {args.markdown}")
    return 0
