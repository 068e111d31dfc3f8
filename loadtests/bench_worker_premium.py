"""The two-worker CPU premium at an equal per-worker request rate (open loop).

    python -m loadtests.bench_worker_premium [--rate-per-worker 100] [--seconds 6]
        [--rounds 3] [--src NAME=DIR ...] [--out DIR]

Closed-loop overhead runs (``bench_overhead --workers 1 2``) compare one worker at c=64 with
two workers at c=32 each: a different load per process, so batching (events per loop turn,
bytes per syscall) differs along with everything else. Here the mock backend
(``loadtests/mock_backend.py``) and the lean client (``loadtests/bench/lean_client.py``, open
loop: a seeded Poisson process) drive, interleaved in every round (each round starting one side
later):

- ``direct`` at 2R: the latency floor;
- ``x1 @R``: one worker at R requests/s;
- ``x1 @2R``: one worker at 2R (the same total rate as two workers: batching's share);
- ``x2 @2R``: two workers at 2R, so each worker sees R (SO_REUSEPORT spreads them);
- ``NAME x2 @2R`` per ``--src NAME=DIR``: two workers running another checkout's code.

Per side, from ``/proc`` for each gateway process (``loadtests/proc_counters.py``): CPU and
run-queue wait per request, context switches and read/write system calls per request. The
premium is ``x2 @2R`` over ``x1 @R``: the same per-process load, so what is left is what a
second worker costs (shared state, its own background loops, cross-core effects). Every
column moves with the machine's load (fewer syscalls and wakes per request when a loop falls
behind and finds more to do per wake), so compare sides of one run, never runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from dataclasses import asdict, dataclass

from loadtests.bench.lean_client import run_lean
from loadtests.bench.overhead_setup import (
    MOCK_ITL_MS,
    MOCK_TTFT_MS,
    MODEL,
    one_backend_config,
    overhead_workload,
    src_env,
)
from loadtests.bench.records import BenchResult
from loadtests.bench.report import summarize
from loadtests.bench.workload import parse_workload
from loadtests.cpu_ledger import OTHERS, CpuLedger
from loadtests.proc_counters import MAIN, Counters, spent, tree_counters
from loadtests.processes import gateway, mock_backend
from loadtests.results_file import fmt, write_results


@dataclass(frozen=True)
class SideSpec:
    name: str
    workers: int
    rate: float
    src: str | None = None  # another checkout's directory (PYTHONPATH), None: this one


@dataclass(frozen=True)
class SideResult:
    name: str
    rate: float
    requests: int
    errors: int
    achieved_per_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    by_process: dict[str, Counters]  # the gateway's processes ("main", "worker N"); {} direct
    error_kinds: dict[str, int] = dataclasses.field(default_factory=dict)

    def total(self) -> Counters:
        out = Counters()
        for counters in self.by_process.values():
            out = out.plus(counters)
        return out


def sides(rate: float, sources: dict[str, str]) -> list[SideSpec]:
    out = [
        SideSpec("direct", 0, 2 * rate),
        SideSpec("x1 @R", 1, rate),
        SideSpec("x1 @2R", 1, 2 * rate),
        SideSpec("x2 @2R", 2, 2 * rate),
    ]
    out += [SideSpec(f"{name} x2 @2R", 2, 2 * rate, src) for name, src in sources.items()]
    return out


def _open_workload(rate: float, seconds: float, seed: int) -> dict[str, object]:
    workload = overhead_workload(1, max(int(rate * seconds), 1))
    workload["arrival"] = {"mode": "open", "rate": rate}
    workload["seed"] = seed
    return workload


async def measure(
    rate: float, seconds: float, rounds: int, sources: dict[str, str]
) -> list[SideResult]:
    specs = sides(rate, sources)
    async with (
        mock_backend(MODEL, MOCK_TTFT_MS, MOCK_ITL_MS) as (backend_url, _),
        contextlib.AsyncExitStack() as stack,
    ):
        config = one_backend_config("premium", backend_url)
        targets: dict[str, tuple[str, int | None]] = {}
        for spec in specs:
            if spec.workers == 0:
                targets[spec.name] = (backend_url, None)
                continue
            env = None if spec.src is None else src_env(spec.src)
            targets[spec.name] = await stack.enter_async_context(gateway(config, spec.workers, env))
        for spec in specs:  # warm every pool and every worker's connections
            url, _ = targets[spec.name]
            await run_lean(url, parse_workload(_open_workload(spec.rate, 1.0, 99)))
        runs: dict[str, list[tuple[BenchResult, dict[str, Counters]]]] = {s.name: [] for s in specs}
        for turn in range(rounds):
            for spec in specs[turn % len(specs) :] + specs[: turn % len(specs)]:
                url, root = targets[spec.name]
                workload = parse_workload(_open_workload(spec.rate, seconds, 7 + turn))
                before = tree_counters(root) if root is not None else {}
                result = await run_lean(url, workload)
                used = spent(tree_counters(root), before) if root is not None else {}
                runs[spec.name].append((result, used))
    return [_side(spec, runs[spec.name]) for spec in specs]


def _side(spec: SideSpec, runs: list[tuple[BenchResult, dict[str, Counters]]]) -> SideResult:
    records = tuple(r for result, _ in runs for r in result.records)
    first = runs[0][0]
    merged = BenchResult(
        url=first.url,
        workload=first.workload,
        mode=first.mode,
        seed=first.seed,
        started_unix=first.started_unix,
        duration_s=sum(result.duration_s for result, _ in runs),
        records=records,
    )
    report = summarize(merged)
    by_process: dict[str, Counters] = {}
    for _, used in runs:
        for key, counters in used.items():
            by_process[key] = by_process.get(key, Counters()).plus(counters)
    return SideResult(
        name=spec.name,
        rate=spec.rate,
        requests=report.requests,
        errors=report.requests - report.ok,
        achieved_per_s=report.request_per_s,
        ttft_p50_ms=report.ttft_ms.p50,
        ttft_p99_ms=report.ttft_ms.p99,
        by_process=by_process,
        error_kinds=report.errors,
    )


def _per_request(counters: Counters, requests: int) -> tuple[float, float, float, float, float]:
    n = max(requests, 1)
    return (
        counters.cpu_s / n * 1e6,
        counters.wait_s / n * 1e6,
        (counters.voluntary + counters.involuntary) / n,
        counters.reads / n,
        counters.writes / n,
    )


def format_table(results: list[SideResult]) -> str:
    direct = next((r for r in results if r.name == "direct"), None)
    header = (
        f"{'side':>18} {'rate':>6} {'reqs':>6} {'err':>4} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'+p50':>7} {'+p99':>7} {'cpu us':>7} {'wait us':>8} {'ctxsw':>6} "
        f"{'reads':>6} {'writes':>6}"
    )
    lines = [header, "-" * len(header)]
    for result in results:
        rows = [(result.name, result.total())]
        if len(result.by_process) > 1:
            rows += [
                (f"  {key}", counters)
                for key, counters in sorted(result.by_process.items())
                if key != MAIN or counters.cpu_s > 0
            ]
        for index, (label, counters) in enumerate(rows):
            cpu, wait, switches, reads, writes = _per_request(counters, result.requests)
            gateway_cols = (
                f"{cpu:>7.0f} {wait:>8.0f} {switches:>6.2f} {reads:>6.2f} {writes:>6.2f}"
                if result.by_process
                else f"{'-':>7} {'-':>8} {'-':>6} {'-':>6} {'-':>6}"
            )
            if index == 0:
                added = [
                    None if direct is None or a is None or b is None else a - b
                    for a, b in (
                        (result.ttft_p50_ms, direct.ttft_p50_ms if direct else None),
                        (result.ttft_p99_ms, direct.ttft_p99_ms if direct else None),
                    )
                ]
                lines.append(
                    f"{label:>18} {result.rate:>6.0f} {result.requests:>6} {result.errors:>4} "
                    f"{fmt(result.ttft_p50_ms):>9} {fmt(result.ttft_p99_ms):>9} "
                    f"{fmt(added[0]):>7} {fmt(added[1]):>7} {gateway_cols}"
                )
            else:
                lines.append(
                    f"{label:<18} {'':>6} {'':>6} {'':>4} {'':>9} {'':>9} "
                    f"{'':>7} {'':>7} {gateway_cols}"
                )
    lines.append(
        "(per request of the side: the gateway's CPU and run-queue wait in us, context "
        "switches, read/write syscalls; +p50/+p99 = TTFT minus direct's, ms)"
    )
    lines.extend(f"{r.name} errors: {r.error_kinds}" for r in results if r.error_kinds)
    lines.extend(_premiums(results))
    return "\n".join(lines)


def _premiums(results: list[SideResult]) -> list[str]:
    by_name = {r.name: r for r in results}
    base = by_name.get("x1 @R")
    if base is None or base.requests == 0:
        return []
    base_row = _per_request(base.total(), base.requests)
    lines = []
    for name in [r.name for r in results if r.by_process and r.name != "x1 @R"]:
        side = by_name[name]
        row = _per_request(side.total(), side.requests)
        ratios = [fmt(a / b, 3) if b else "-" for a, b in zip(row, base_row, strict=True)]
        lines.append(
            f"{name} / x1 @R: cpu {ratios[0]}x, wait {ratios[1]}x, ctxsw {ratios[2]}x, "
            f"reads {ratios[3]}x, writes {ratios[4]}x"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench_worker_premium",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--rate-per-worker", type=float, default=100.0, help="R, requests/s per worker"
    )
    parser.add_argument("--seconds", type=float, default=6.0, help="per side per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="also two workers running the code in DIR (PYTHONPATH), at 2R",
    )
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    import uvloop

    sources = {name: src for name, _, src in (s.partition("=") for s in args.src)}
    ledger = CpuLedger({})
    before = ledger.read()
    results = uvloop.run(measure(args.rate_per_worker, args.seconds, args.rounds, sources))
    machine = ledger.read().minus(before)
    print(format_table(results))
    cores = len(os.sched_getaffinity(0))
    print(
        f"the whole run: {machine.wall:.0f} s; at least {machine.busy_groups()} autogroups busy "
        f"(>= 10% of a core; short-lived processes escape the count), "
        f"others used {machine.by_label[OTHERS] / machine.wall:.2f} "
        f"of {cores} cores (nice does not share CPU between autogroups: loadtests/cpu_ledger.py)"
    )
    payload = {
        "benchmark": "worker_premium",
        "load_average": os.getloadavg(),
        "rate_per_worker": args.rate_per_worker,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "sources": sources,
        "busy_autogroups": machine.busy_groups(),
        "others_cores": machine.by_label[OTHERS] / machine.wall,
        "sides": [{**asdict(r), "total": asdict(r.total())} for r in results],
    }
    write_results(args.out, "worker-premium", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
