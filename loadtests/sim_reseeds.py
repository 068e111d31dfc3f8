"""How far a simulator comparison moves by chance: every listed policy on one scenario's trace,
run again with only the router's seed (and the probes' jitter) changed, and per policy the range
of each headline number over those runs.

    python -m loadtests.sim_reseeds [--scenarios 5 7] [--reseeds 5] [--seed-offset K]
        [--policies predicted_ttft,least_loaded,...] [--jobs 2] [--out loadtests/results]

The requests (arrivals, prompts, answer lengths) stay the same; what changes is the picker's
tie-breaking and the exact times probes and scrapes land. A policy is as good on every one of
those runs, so the spread of a number over them is the floor under any claim that one policy
beats another on it in this scenario: a whole-run e2e p50 0.5% apart, when each policy's own
p50 moves 1% by its seed, is a tie, whichever side the shipped seed happens to fall on. Seeds:
run j of scenario seed s uses s + 1000 j (j = 0 is the run ``meridian sim`` and
``bench_issue14`` report); the trace is seed s's, ``bench_issue14 --seeds``' numbering.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtests.results_file import write_results
from loadtests.sim.loop import simulate
from loadtests.sim.scenario import Scenario, ScenarioError, load_scenario
from loadtests.sim.summary import summarize
from loadtests.sim.trace import build_trace

SCENARIOS = Path(__file__).parent / "scenarios"
DEFAULT_POLICIES = "predicted_ttft,least_loaded,llm_d,cache_aware,round_robin,latency_ewma"
# The numbers issue 14's whole-answer goal compares (loadtests/issue14_goals.py, e2e_row).
NUMBERS = ("e2e_p50_ms", "e2e_p99_ms", "ttft_p99_ms", "goodput")
RESEED = 1000  # run j's router seed is the scenario's + RESEED x j


@dataclass(frozen=True, slots=True)
class Spread:
    """One policy's headline numbers over the reseeded runs of one scenario seed."""

    scenario: str
    seed: int
    policy: str
    values: dict[str, list[float]]  # number -> one value per run, run 0 first

    def low(self, number: str) -> float:
        return min(self.values[number])

    def high(self, number: str) -> float:
        return max(self.values[number])

    def relative(self, number: str) -> float:
        """(high - low) / low: how far this number moves by the seed alone."""
        low = self.low(number)
        return (self.high(number) - low) / low if low else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "seed": self.seed, "policy": self.policy,
                "values": self.values}  # fmt: skip


def reseeded(scenario: Scenario, policy: str, reseeds: int) -> Spread:
    """``policy`` on ``scenario``'s trace, once per router seed."""
    trace = build_trace(scenario, None)
    goal = scenario.objective
    values: dict[str, list[float]] = {number: [] for number in NUMBERS}
    for j in range(reseeds):
        run = simulate(scenario.model_copy(update={"seed": scenario.seed + RESEED * j}), trace,
                       policy)  # fmt: skip
        summary = summarize(run, trace, goal.ttft_ms, goal.itl_ms)
        for number in NUMBERS:
            values[number].append(float(getattr(summary, number)))
    return Spread(scenario.name, scenario.seed, policy, values)


def _job(path: Path, offset: int, policy: str, reseeds: int) -> Spread:
    """One (scenario, policy) of a process pool: top level, picklable."""
    loaded = load_scenario(path)
    if isinstance(loaded, ScenarioError):
        raise SystemExit(loaded.message)
    scenario = loaded.model_copy(update={"seed": loaded.seed + 10 * offset})
    return reseeded(scenario, policy, reseeds)


def table(spreads: Sequence[Spread]) -> str:
    """One row per scenario and policy: each number's low-high and its relative spread."""
    head = (f"{'scenario':<32} {'seed':>4} {'policy':<15} {'e2e p50':>17} {'e2e p99':>21} "
            f"{'TTFT p99':>15} {'goodput':>15}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for s in spreads:
        cells = []
        for number, width in (("e2e_p50_ms", 17), ("e2e_p99_ms", 21), ("ttft_p99_ms", 15)):
            text = f"{s.low(number):.0f}-{s.high(number):.0f} {100 * s.relative(number):.1f}%"
            cells.append(f"{text:>{width}}")
        good = f"{100 * s.low('goodput'):.1f}-{100 * s.high('goodput'):.1f}%"
        lines.append(f"{s.scenario:<32} {s.seed:>4} {s.policy:<15} {' '.join(cells)} {good:>15}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="*", help="scenario numbers (default: all)")
    parser.add_argument("--reseeds", type=int, default=5, help="runs per policy (>= 2)")
    parser.add_argument("--seed-offset", type=int, default=0, help="scenario seed + 10 x this")
    parser.add_argument("--policies", default=DEFAULT_POLICIES)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    if args.reseeds < 2:
        parser.error("--reseeds: at least 2 (one run has no spread)")
    wanted = set(args.scenarios or ())
    paths = [
        path for path in sorted(SCENARIOS.glob("[0-9]*-*.yaml"),
                                key=lambda p: int(p.name.split("-", 1)[0]))
        if not wanted or path.name.split("-", 1)[0] in wanted
    ]  # fmt: skip
    if not paths:
        parser.error(f"--scenarios: none of {sorted(wanted)} is in {SCENARIOS}")
    policies = [p for p in args.policies.split(",") if p]
    jobs = [(path, args.seed_offset, policy, args.reseeds) for path in paths for policy in policies]
    with ProcessPoolExecutor(max(args.jobs, 1)) as pool:
        spreads = list(pool.map(_job, *zip(*jobs, strict=True)))
    print(table(spreads))
    write_results(args.out, "sim-reseeds", {"reseed": RESEED, "reseeds": args.reseeds,
                                            "spreads": [s.as_dict() for s in spreads]})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
