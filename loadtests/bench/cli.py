"""``meridian bench``: load-generate against an OpenAI-compatible endpoint and report.

    meridian bench --url http://127.0.0.1:8000 \\
        --workload loadtests/workloads/chat-shared-prefix.yaml --out out/run1 \\
        --slo-ttft-ms 500 --slo-itl-p99-ms 60
    meridian bench compare out/run1/report.json out/run2/report.json

Exit status: 0 when at least one request succeeded; 1 when none did (said on stderr with the
error counts, and no plots are drawn) or when the server's ``/v1/models`` does not list the
workload's model; 2 for bad arguments or a bad workload file.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from loadtests.bench.compare import CompareError, format_comparison, load_report
from loadtests.bench.output import format_table, write_outputs
from loadtests.bench.preflight import all_failed, model_problem
from loadtests.bench.report import summarize
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.stats import Slo
from loadtests.bench.workload import WorkloadError, load_workload, with_overrides

T = TypeVar("T")


def run_fast(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when installed: at a thousand streams the loop's own cost is ITL error."""
    # Everything alive now (modules, the workload) never needs collecting again: keep it out of
    # the collector's full passes, which otherwise stall the loop for tens of milliseconds.
    gc.freeze()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meridian bench",
        description="Load-generate against an OpenAI-compatible endpoint "
        "(see also: meridian bench compare A.json B.json).",
    )
    parser.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--workload", required=True, type=Path, help="workload YAML file")
    parser.add_argument("--out", type=Path, help="directory for report.json, CSV and plots")
    parser.add_argument("--mode", choices=("open", "closed"), help="override the arrival mode")
    parser.add_argument("--rate", type=float, help="open loop: sessions per second")
    parser.add_argument("--concurrency", type=int, help="closed loop: sessions in flight")
    parser.add_argument("--ramp-up", type=float, help="closed loop: seconds to start all users")
    parser.add_argument("--requests", type=int, help="stop after starting this many requests")
    parser.add_argument("--duration", type=float, help="stop starting requests after seconds")
    parser.add_argument("--seed", type=int, help="override the workload seed")
    parser.add_argument("--model", help="override the workload's model name")
    parser.add_argument("--timeout", type=float, help="per-request timeout in seconds")
    parser.add_argument("--slo-ttft-ms", type=float, help="goodput: TTFT bound per request")
    parser.add_argument("--slo-itl-p99-ms", type=float, help="goodput: per-request ITL p99 bound")
    parser.add_argument("--max-connections", type=int, help="client connection pool size")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return parser


def _compare(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="meridian bench compare", description="Two bench reports side by side, B/A ratios."
    )
    parser.add_argument("a", type=Path, help="baseline report.json (A)")
    parser.add_argument("b", type=Path, help="candidate report.json (B)")
    args = parser.parse_args(argv)
    try:
        a, b = load_report(args.a), load_report(args.b)
    except CompareError as error:
        print(f"meridian bench compare: {error}", file=sys.stderr)
        return 2
    print(format_comparison(a, b, f"A: {_label(args.a)}", f"B: {_label(args.b)}"))
    return 0


def _label(path: Path) -> str:
    return path.parent.name if path.name == "report.json" and path.parent.name else path.stem


def main(argv: list[str]) -> int:
    if argv and argv[0] == "compare":
        return _compare(argv[1:])
    args = _parser().parse_args(argv)
    try:
        workload = with_overrides(
            load_workload(args.workload),
            mode=args.mode,
            rate=args.rate,
            concurrency=args.concurrency,
            ramp_up_s=args.ramp_up,
            requests=args.requests,
            duration_s=args.duration,
            seed=args.seed,
            model=args.model,
            request_timeout_s=args.timeout,
        )
    except WorkloadError as error:
        print(f"meridian bench: {error}", file=sys.stderr)
        return 2
    problem = run_fast(model_problem(args.url, workload.model))
    if problem is not None:
        print(f"meridian bench: {problem}", file=sys.stderr)
        return 1
    options = BenchOptions(max_connections=args.max_connections, progress=not args.no_progress)
    result = run_fast(run_bench(args.url, workload, options))
    report = summarize(result, Slo(ttft_ms=args.slo_ttft_ms, itl_p99_ms=args.slo_itl_p99_ms))
    print(format_table(report))
    if report.ok == 0:
        print(f"meridian bench: {all_failed(report.requests, report.errors)}", file=sys.stderr)
    if args.out is not None:
        written = write_outputs(result, report, args.out)
        if not args.no_plots and report.ok > 0:
            from loadtests.bench.plots import write_plots  # matplotlib is slow to import

            written += write_plots(result, args.out)
        print("\nwrote " + ", ".join(str(path) for path in written))
    return 0 if report.ok > 0 else 1
