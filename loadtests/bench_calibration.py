"""How well does predicted_ttft's TTFT prediction match what happened (issue 14's calibration
goal: median |predicted - actual| / actual <= 10% in every scenario, >= 90% of actual TTFTs at
or below the predicted p90), and what does it cost the tail? Each shipped simulator scenario,
predicted_ttft with one or more policy-param variants, for one or more seeds: the median
relative error, the share below p90, TTFT p50 / p99 and e2e p50 / p99, each variant's TTFT p99
over the first variant's (same scenario, same seed).

    python -m loadtests.bench_calibration [--scenarios 3 6] [--seeds 3]
        [--variant NAME:key=value,key=value ...] [--against FILE.json] [--out DIR]

Variants (default ``shipped`` and ``learning-off``) are policy params laid over the scenario's
own ``policy_params.predicted_ttft`` (``learning-off``: every learning rate at 1e-6, i.e. the
configuration as given). ``--seeds N``: the scenario's own seed and N-1 more (seed + 10, + 20,
...). ``--against``: an earlier run's JSON (say, on the previous commit): every row gets its
``shipped`` error and TTFT p99 beside this run's, so before/after is one table. The simulator
is deterministic per seed, so the numbers do not depend on how busy the machine is. Table on
stdout, JSON in ``loadtests/results/``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from loadtests.bench_arrivals import shipped
from loadtests.results_file import write_results
from loadtests.sim.loop import simulate
from loadtests.sim.scenario import Scenario, ScenarioError, load_scenario
from loadtests.sim.summary import summarize
from loadtests.sim.trace import build_trace

POLICY = "predicted_ttft"
OFF = 1e-6
DEFAULT_VARIANTS = ("shipped:", f"learning-off:learning_rate={OFF},bias_learning_rate={OFF}")


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``name:key=value,key=value`` -> (name, params); values are JSON (else strings)."""
    name, _, rest = text.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, raw = item.partition("=")
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return name, params


def with_params(scenario: Scenario, params: dict[str, Any], seed: int) -> Scenario:
    merged = dict(scenario.policy_params)
    merged[POLICY] = {**scenario.policy_params.get(POLICY, {}), **params}
    return scenario.model_copy(update={"policy_params": merged, "seed": seed})


def one_run(scenario: Scenario) -> dict[str, float | None]:
    trace = build_trace(scenario, None)
    goal = scenario.objective
    s = summarize(simulate(scenario, trace, POLICY), trace, goal.ttft_ms, goal.itl_ms)
    return {
        "median_rel_error": s.calibration_median_rel_error,
        "below_p90": s.calibration_below_p90,
        "ttft_p50_ms": s.ttft_p50_ms,
        "ttft_p99_ms": s.ttft_p99_ms,
        "e2e_p50_ms": s.e2e_p50_ms,
        "e2e_p99_ms": s.e2e_p99_ms,
        "goodput": s.goodput,
    }


def _pct(value: float | None) -> str:
    return "    -" if value is None else f"{100 * value:5.1f}"


def _earlier(path: Path | None) -> dict[tuple[str, int], dict[str, Any]]:
    if path is None:
        return {}
    runs = json.loads(path.read_text())["runs"]
    return {(r["scenario"], r["seed"]): r["variants"] for r in runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="*", help="scenario numbers (default: all)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per scenario")
    parser.add_argument("--variant", action="append", help="NAME:key=value,... (repeatable)")
    parser.add_argument("--against", type=Path, help="an earlier run's JSON to compare with")
    parser.add_argument("--out", type=Path, default=Path("loadtests/results"))
    args = parser.parse_args(argv)
    variants = [parse_variant(v) for v in (args.variant or DEFAULT_VARIANTS)]
    before = _earlier(args.against)
    print(
        f"{'scenario':30s} {'seed':>4s} {'variant':14s} |err|%  <p90%  TTFT p50   p99  "
        "p99/1st   e2e p50    p99" + ("  | before: |err|%  p99" if before else "")
    )
    rows: list[dict[str, Any]] = []
    for path in shipped(args.scenarios):
        loaded = load_scenario(path)
        if isinstance(loaded, ScenarioError):
            raise SystemExit(loaded.message)
        for k in range(args.seeds):
            seed = loaded.seed + 10 * k
            runs = {n: one_run(with_params(loaded, p, seed)) for n, p in variants}
            first = runs[variants[0][0]]["ttft_p99_ms"] or 1.0
            old = before.get((path.name, seed), {}).get("shipped")
            for name, r in runs.items():
                line = (
                    f"{path.stem[:30]:30s} {seed:4d} {name[:14]:14s} "
                    f"{_pct(r['median_rel_error'])} {_pct(r['below_p90'])} "
                    f"{r['ttft_p50_ms']:8.0f} {r['ttft_p99_ms']:6.0f} "
                    f"{(r['ttft_p99_ms'] or 0.0) / first:7.2f} "
                    f"{r['e2e_p50_ms']:9.0f} {r['e2e_p99_ms']:6.0f}"
                )
                if old is not None and name == "shipped":
                    line += f"  |         {_pct(old['median_rel_error'])} {old['ttft_p99_ms']:5.0f}"
                print(line, flush=True)
            rows.append({"scenario": path.name, "seed": seed, "variants": runs})
    params = {n: p for n, p in variants}
    write_results(
        args.out, "bench-calibration", {"policy": POLICY, "variants": params, "runs": rows}
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
