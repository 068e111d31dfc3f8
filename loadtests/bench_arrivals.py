"""Does extrapolating other clients' arrivals between scrapes pay (routing.arrivals)? Each
shipped simulator scenario, predicted_ttft only, with the gateways' arrivals estimate
(``signals.engine_counters``) on and off in the same run, for one or more seeds: TTFT p50 and
p99, e2e p50 and p99, the median prediction error and goodput, and the on/off ratios.

    python -m loadtests.bench_arrivals [--scenarios 1 2 3] [--seeds 1] [--out DIR]

``--seeds N``: the scenario's own seed and N-1 more (seed + 10, + 20, ...): a seed redraws
the whole trace and every random draw, so the spread over seeds is how much of a ratio is
one lucky draw. Table on stdout, JSON in ``loadtests/results/``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from loadtests.results_file import write_results
from loadtests.sim.loop import simulate
from loadtests.sim.scenario import Scenario, ScenarioError, load_scenario
from loadtests.sim.summary import Summary, summarize
from loadtests.sim.trace import build_trace

SCENARIOS = Path(__file__).parent / "scenarios"
POLICY = "predicted_ttft"


def shipped(numbers: list[str] | None) -> list[Path]:
    """The numbered scenarios (``1-*.yaml``, ``2-*.yaml``, ... in number order), or the ones
    named."""
    numbered = (p for p in SCENARIOS.glob("[0-9]*-*.yaml") if p.name.split("-", 1)[0].isdigit())
    paths = sorted(numbered, key=lambda p: int(p.name.split("-", 1)[0]))
    if numbers:
        paths = [p for p in paths if p.name.split("-", 1)[0] in numbers]
    return paths


def with_counters(scenario: Scenario, on: bool, seed: int) -> Scenario:
    signals = scenario.signals.model_copy(update={"engine_counters": on})
    return scenario.model_copy(update={"signals": signals, "seed": seed})


def one_run(scenario: Scenario) -> Summary:
    trace = build_trace(scenario, None)
    goal = scenario.objective
    return summarize(simulate(scenario, trace, POLICY), trace, goal.ttft_ms, goal.itl_ms)


def _row(summary: Summary) -> dict[str, float | None]:
    return {
        "ttft_p50_ms": summary.ttft_p50_ms,
        "ttft_p99_ms": summary.ttft_p99_ms,
        "e2e_p50_ms": summary.e2e_p50_ms,
        "e2e_p99_ms": summary.e2e_p99_ms,
        "median_rel_error": summary.calibration_median_rel_error,
        "goodput": summary.goodput,
    }


def _ratio(on: float | None, off: float | None) -> float | None:
    return None if on is None or not off else on / off


def compare(path: Path, seed: int) -> dict[str, Any]:
    """One scenario and seed, the estimate off and on."""
    loaded = load_scenario(path)
    if isinstance(loaded, ScenarioError):
        raise SystemExit(loaded.message)
    off = _row(one_run(with_counters(loaded, False, seed)))
    on = _row(one_run(with_counters(loaded, True, seed)))
    ratios = {k: _ratio(on[k], v) for k, v in off.items()}
    return {"scenario": path.name, "seed": seed, "off": off, "on": on, "on_over_off": ratios}


def _cells(row: dict[str, Any]) -> str:
    off, on, ratio = row["off"], row["on"], row["on_over_off"]
    keys = ("ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms")
    cells = [f"{off[k]:7.0f} {on[k]:7.0f} {ratio[k]:5.2f}" for k in keys]
    errors = [row[m]["median_rel_error"] for m in ("off", "on")]
    cells.append(" ".join("    -" if e is None else f"{100 * e:5.1f}" for e in errors))
    return " | ".join(cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="*", help="scenario numbers (default: all)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per scenario")
    parser.add_argument("--out", type=Path, default=Path("loadtests/results"))
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    header = (
        f"{'scenario':34s} {'seed':>4s}   TTFT p50 off/on/ratio | TTFT p99 off/on/ratio | "
        "e2e p50 off/on/ratio  | e2e p99 off/on/ratio  | |err| % off on"
    )
    print(header)
    for path in shipped(args.scenarios):
        loaded = load_scenario(path)
        assert not isinstance(loaded, ScenarioError), loaded
        for k in range(args.seeds):
            row = compare(path, loaded.seed + 10 * k)
            rows.append(row)
            print(f"{path.stem:34s} {row['seed']:4d}   {_cells(row)}", flush=True)
    write_results(args.out, "bench-arrivals", {"policy": POLICY, "runs": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
