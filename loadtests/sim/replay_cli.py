"""``meridian sim --replay FILE --fleet FLEET.yaml [--config GATEWAY.yaml] [--workload W.yaml]``:
a recorded trace through every selected policy, with the synthetic scenarios' tables and plots,
and the recorded outcome beside the replays (per-backend split, TTFT p50 / p99, spend).

FILE is a ``meridian-trace`` file (v1 or v2) (``loadtests/sim/replay_trace.py``), a ``meridian bench``
``requests.csv`` (``--workload``: the workload file of that run, for prefix hashes), or a
Meridian request log in JSON format. ``--save-trace OUT`` writes what was read as a trace file.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from loadtests.sim.loop import simulate
from loadtests.sim.replay_fleet import replay_fleet
from loadtests.sim.replay_follow import Follow, following, let_go_at
from loadtests.sim.replay_import import load_any
from loadtests.sim.replay_trace import ReplayTrace, TraceFile, TraceFormatError, write_trace
from loadtests.sim.results import PolicyRun
from loadtests.sim.scenario import Scenario
from loadtests.sim.summary import Summary
from loadtests.sim.trace import Trace
from routing.price import Price


def add_arguments(parser: argparse.ArgumentParser) -> None:
    replay = parser.add_argument_group("replay a recorded trace (instead of a scenario)")
    replay.add_argument("--replay", type=Path, help="trace, bench requests.csv or request log")
    replay.add_argument("--fleet", type=Path, help="fleet file (loadtests/fleets/) to replay on")
    replay.add_argument("--config", type=Path, help="gateway config: region, prices, params")
    replay.add_argument("--workload", type=Path, help="the bench run's workload (prefix hashes)")
    replay.add_argument("--gateway-region", help="where the recording gateway ran")
    replay.add_argument("--save-trace", type=Path, help="write the trace read as meridian-trace")
    replay.add_argument(
        "--objective-ms", type=float, help="p90 TTFT objective of requests that carry none"
    )
    replay.add_argument(
        "--follow-recorded", type=float, default=0.0, metavar="S",
        help="follow the recorded routes for the first S seconds (the replay's router starts "
        "where the recording's was: loadtests/sim/replay_follow.py); compared after them",
    )  # fmt: skip
    replay.add_argument(
        "--signals-after", type=float, default=0.0, metavar="S",
        help="no scrape and no probe for the first S seconds: replays a gateway that had just "
        "started (it routed its first requests on configuration alone)",
    )  # fmt: skip
    replay.add_argument(
        "--follow-samples", type=int, default=0, metavar="N",
        help="follow the recorded routes until the router learned N recorded first tokens on "
        "every backend the recording used N times (with --follow-recorded: whichever is first)",
    )  # fmt: skip


def follow_of(args: argparse.Namespace) -> Follow:
    return Follow(seconds=args.follow_recorded or None, samples=args.follow_samples or None)


def run(scenario: Scenario, trace: Trace, policy: str, args: argparse.Namespace) -> PolicyRun:
    """One policy's pass: a replay follows the recording first when ``--follow-recorded`` or
    ``--follow-samples``; where its router let go is kept for ``compared_from``."""
    follow = follow_of(args)
    if not isinstance(trace, ReplayTrace) or not follow.active:
        return simulate(scenario, trace, policy)
    simulation = following(scenario, trace, policy, follow)
    run = simulation.run()
    if not hasattr(args, "let_go_s"):
        args.let_go_s = {}
    args.let_go_s[policy] = let_go_at(simulation)
    return run


def compared_from(args: argparse.Namespace) -> dict[str, float]:
    """Per policy, the arrival (s) from which its replay decided on its own (``run``)."""
    return dict(getattr(args, "let_go_s", {}))


def load(args: argparse.Namespace) -> tuple[Scenario, ReplayTrace, str | None] | str:
    """(scenario, trace, the policy the trace was recorded under) or an error message."""
    if args.fleet is None:
        return "--replay needs --fleet (the fleet file to replay on)"
    try:
        recorded = load_any(args.replay, args.workload)
    except TraceFormatError as exc:
        return str(exc)
    if not recorded.lines:
        return f"{args.replay}: no request to replay"
    if args.objective_ms is not None:
        lines = tuple(
            line if line.ttft_objective_ms is not None
            else dataclasses.replace(line, ttft_objective_ms=args.objective_ms)
            for line in recorded.lines
        )  # fmt: skip
        recorded = dataclasses.replace(recorded, lines=lines)
    span = recorded.lines[-1].t_s - recorded.lines[0].t_s
    fleet = replay_fleet(args.fleet, args.config, args.gateway_region, span, args.signals_after)
    if isinstance(fleet, str):
        return fleet
    if args.save_trace is not None:
        write_trace(args.save_trace, recorded)
    trace = ReplayTrace(recorded, fleet.scenario.regions, fleet.gateway_region)
    return fleet.scenario, trace, fleet.recorded_policy


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def recorded_spend(trace: TraceFile, scenario: Scenario) -> float:
    prices: dict[str, Price] = {
        g.name: g.price.price() for g in scenario.backends if g.price is not None
    }
    total = 0.0
    for line in trace.lines:
        r = line.recorded
        price = None if r is None or r.backend is None else prices.get(r.backend)
        if price is not None and r is not None:
            cached = min(r.cached_tokens or 0, line.prompt_tokens)
            total += price.tokens_cost(line.prompt_tokens - cached, cached, line.output_tokens)
    return total


def recorded_versus(
    trace: TraceFile,
    scenario: Scenario,
    summaries: Sequence[Summary],
    policy: str | None,
    runs: Sequence[PolicyRun] = (),
    after_s: Mapping[str, float] | None = None,
) -> str:
    """The recording's own split, TTFT and spend beside each replay's, with the differences;
    with ``after_s`` (per policy, where a followed replay let go: ``compared_from``) also over
    the requests after it, per run."""
    recorded = [line.recorded for line in trace.lines if line.recorded is not None]
    ttfts = [r.ttft_ms for r in recorded if r.ttft_ms is not None]
    if not recorded or not ttfts:
        return "the trace records no outcomes to compare with"
    names = [group.name for group in scenario.backends]
    counts = {name: sum(1 for r in recorded if r.backend == name) for name in names}
    total = max(sum(counts.values()), 1)
    split = {name: counts[name] / total for name in names}
    p50, p99 = _percentile(ttfts, 50), _percentile(ttfts, 99)
    lines = [
        f"recorded{'' if policy is None else f' (under {policy})'}: TTFT p50 {p50:.0f} ms, "
        f"p99 {p99:.0f} ms, spend {recorded_spend(trace, scenario):.4f}; split "
        + ", ".join(f"{name} {share:.1%}" for name, share in split.items())
    ]
    for s in summaries:
        served = max(sum(s.per_backend_requests.values()), 1)
        worst = max(
            abs(s.per_backend_requests.get(name, 0) / served - split[name]) for name in names
        )
        ratio = s.ttft_p50_ms / p50 if p50 else float("nan")
        lines.append(
            f"  replay {s.policy:<22} split off by at most {100 * worst:.1f} pp, "
            f"TTFT p50 {s.ttft_p50_ms:.0f} ms ({ratio:.2f}x recorded), p99 {s.ttft_p99_ms:.0f} ms"
        )
    followed = [run for run in runs if after_s and run.policy in after_s]
    if followed:
        lines += ["after following the recorded routes:"]
        lines += [_after(trace, run, names, after_s[run.policy]) for run in followed if after_s]
    return "\n".join(lines)


def _after(trace: TraceFile, run: PolicyRun, names: Sequence[str], after_s: float) -> str:
    first = trace.lines[0].t_s
    keep = [i for i, line in enumerate(trace.lines) if line.t_s - first >= after_s]
    recorded = [trace.lines[i].recorded for i in keep]
    theirs = [r.backend for r in recorded if r is not None and r.backend]
    mine = [run.backends[b].name for b in run.results.backend[keep].tolist() if b >= 0]
    worst = max(
        abs(mine.count(n) / max(len(mine), 1) - theirs.count(n) / max(len(theirs), 1))
        for n in names
    )
    ttfts = [r.ttft_ms for r in recorded if r is not None and r.ttft_ms is not None]
    ours = run.results.ttft_ms[keep]
    p50, recorded_p50 = _percentile(ours[~np.isnan(ours)].tolist(), 50), _percentile(ttfts, 50)
    ratio = p50 / recorded_p50 if p50 is not None and recorded_p50 else float("nan")
    return (
        f"  replay {run.policy:<22} from {after_s:.1f} s, {len(keep)} requests: split off by at "
        f"most {100 * worst:.1f} pp, TTFT p50 {ratio:.2f}x recorded"
    )
