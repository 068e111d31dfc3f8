"""Attach a profiler to a gateway while a closed streaming workload runs through it.

    python -m loadtests.profile_attach [--concurrency 32] [--tokens 64] [--requests 640]
        -- perf record -F 5000 -g -p PID -o /tmp/gw.perf

Three processes, as in ``bench_event_cpu``: one emulated backend (TTFT 20 ms, 5 ms a token),
one ``meridian serve`` and this load generator. A warm-up round runs first; then the command
after ``--`` starts, with every ``PID`` in it replaced by the gateway's pid, the measured round
runs, and the command gets SIGINT (perf and py-spy write their output on it) and is waited for.

Use ``perf`` for where CPU goes (it samples on-CPU time only). py-spy also counts a thread that
is runnable but preempted as busy; on loopback a write wakes the receiving process, which can
take the core there and then, so py-spy inflates whatever writes (docs/results/perf-issue16.md,
session 12). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from loadtests.bench.overhead_setup import ENGINE
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload
from loadtests.bench_peers import MODEL, _workload
from loadtests.processes import emulated_backend, gateway


async def profile(args: argparse.Namespace) -> int:
    async with emulated_backend("b1", MODEL, ENGINE) as (backend_url, _):
        backend = {"name": "b1", "region": "local", "url": backend_url + "/v1", "models": [MODEL]}
        config = {"backends": [{**backend, "max_connections": 4096}]}
        async with gateway(config, 1) as (url, pid):
            options = BenchOptions(max_connections=args.concurrency)
            warm = _workload(args.concurrency, args.concurrency * 4, args.tokens)
            await run_bench(url, parse_workload(warm), options)
            command = [part.replace("PID", str(pid)) for part in args.command]
            profiler = await asyncio.create_subprocess_exec(*command)
            try:
                measured = _workload(args.concurrency, args.requests, args.tokens)
                result = await run_bench(url, parse_workload(measured), options)
            finally:
                profiler.send_signal(signal.SIGINT)
                code = await profiler.wait()
    failed = sum(1 for record in result.records if not record.ok)
    print(f"profiler exited with {code}; gateway pid was {pid}; {failed} request(s) failed")
    return 1 if failed else 0  # a profile of error answers is not the relay's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.profile_attach",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64, help="output tokens a request")
    parser.add_argument("--requests", type=int, default=640, help="in the measured round")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the profiler's argv")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("give the profiler's command after --, with PID for the gateway's pid")
    import uvloop

    return uvloop.run(profile(args))


if __name__ == "__main__":
    raise SystemExit(main())
