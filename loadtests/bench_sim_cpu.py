"""The simulator's CPU time, this checkout against others in one run (issue 16's sim goal).

    .venv/bin/python -m loadtests.bench_sim_cpu [--src before=DIR ...] [--rounds 2]
        [--requests 100000] [--policy predicted_ttft]
        [--scenario loadtests/scenarios/speed-100-backends.yaml]

The goal is stated as the CPU time of ``meridian sim SCENARIO --policies predicted_ttft
--requests 100000`` (100 backends), and on this shared machine that time moves by +-15% with
the load: two checkouts timed an hour apart cannot be compared. So every round runs the sim
once per side (``meridian sim``), in turn, each in its own process with its own code
(``PYTHONPATH`` and working directory: the side's checkout, e.g. ``git worktree add --detach
DIR main``), and the table gives each side's median and lowest CPU seconds (user + system of
that process, from ``wait4``), wall time, and CPU against this checkout's. Every side runs the
same scenario file (this checkout's, by absolute path) so only the code differs. The load
average is printed with every run, and the JSON keeps it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
SCENARIO = HERE / "loadtests" / "scenarios" / "speed-100-backends.yaml"


def run_side(src: Path, scenario: Path, policy: str, requests: int) -> dict[str, float]:
    """One sim run with ``src``'s code: its CPU seconds (user, system) and wall seconds."""
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as out:
        command = [
            sys.executable, "-m", "gateway.cli", "sim", str(scenario), "--policies", policy,
            "--requests", str(requests), "--no-plots", "--out", out,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(src)}
        load = os.getloadavg()[0]
        started = time.perf_counter()
        child = subprocess.Popen(
            command, cwd=src, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        stderr = child.stderr.read().decode() if child.stderr is not None else ""
        if child.returncode != 0:
            raise SystemExit(f"sim failed in {src} ({child.returncode}): {stderr[-2000:]}")
    return {
        "user_s": usage.ru_utime, "system_s": usage.ru_stime,
        "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall, "load_before": load,
        "max_rss_mb": usage.ru_maxrss / 1024.0,
    }  # fmt: skip


def summarize(runs: dict[str, list[dict[str, float]]]) -> list[dict[str, Any]]:
    ours = statistics.median(r["cpu_s"] for r in runs["this"])
    rows = []
    for side, samples in runs.items():
        cpu = statistics.median(r["cpu_s"] for r in samples)
        rows.append({
            "side": side, "cpu_s": cpu, "cpu_min_s": min(r["cpu_s"] for r in samples),
            "user_s": statistics.median(r["user_s"] for r in samples),
            "wall_s": statistics.median(r["wall_s"] for r in samples),
            "max_rss_mb": max(r["max_rss_mb"] for r in samples), "cpu_vs_this": cpu / ours,
            "runs": samples,
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--src", action="append", default=[], metavar="NAME=DIR",
                        help="another checkout as a side of the same run")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--policy", default="predicted_ttft")
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--out", type=Path, default=Path("loadtests/results"))
    args = parser.parse_args(argv)
    sides = [("this", HERE)]
    sides += [(name, Path(src).resolve()) for name, _, src in (s.partition("=") for s in args.src)]
    scenario = args.scenario.resolve()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    for round_no in range(args.rounds):
        for name, src in sides:
            result = run_side(src, scenario, args.policy, args.requests)
            runs[name].append(result)
            print(
                f"round {round_no + 1} {name:<10} cpu {result['cpu_s']:7.1f} s "
                f"(user {result['user_s']:.1f}) wall {result['wall_s']:6.1f} s "
                f"load {result['load_before']:.1f}",
                flush=True,
            )
    rows = summarize(runs)
    print(
        f"{'side':<10}{'cpu s':>9}{'min':>9}{'user s':>9}{'wall s':>9}{'rss MB':>9}{'vs this':>9}"
    )
    for row in rows:
        print(
            f"{row['side']:<10}{row['cpu_s']:>9.1f}{row['cpu_min_s']:>9.1f}{row['user_s']:>9.1f}"
            f"{row['wall_s']:>9.1f}{row['max_rss_mb']:>9.0f}{row['cpu_vs_this']:>8.2f}x"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "bench_sim_cpu.json"
    meta = {"sides": {name: str(src) for name, src in sides}, "scenario": str(scenario),
            "policy": args.policy, "requests": args.requests, "rounds": args.rounds,
            "load_average_end": os.getloadavg()}  # fmt: skip
    target.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
