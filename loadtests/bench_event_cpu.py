"""CPU per relayed SSE event, apart from CPU per request and from background work.

    python -m loadtests.bench_event_cpu [--concurrency 1 32] [--requests 60] [--rounds 3]
        [--low 8] [--high 64] [--src base=/tmp/main ...] [--no-nginx] [--out DIR]

``bench_peers``' CPU column divides a proxy's whole CPU by the token events it relayed, so at
concurrency 1 it mixes three things: the work per event, the work per request (accept, route,
the upstream request, the log line; ~3 ms for Meridian, shared by 32 events) and whatever the
process does in the background per second (probes, scrapes, timers). Here every side relays
the same workload at two stream lengths (``--low`` and ``--high`` output tokens, same prompt),
alternated within each round so machine noise hits both alike; the slope of the process tree's
CPU per request between the two lengths is the CPU per event, the intercept the CPU per
request. Before the rounds each side sits idle for ``--idle-s`` and its CPU per second is
reported (a share of each event at low concurrency), with its wake-ups per second (voluntary
context switches: the loop going back to sleep). Sides: Meridian from this checkout,
Meridian from each ``--src NAME=DIR`` checkout (``PYTHONPATH``), and nginx (Debian's, a byte
relay: the floor) when installed. One emulated backend for all (TTFT 20 ms, 5 ms a token).
CPU is the scheduler's nanosecond count (``/proc/<pid>/task/*/schedstat``, via
``loadtests.proc_counters``), not clock ticks: at 10 ms a tick a 180-request side moved in
steps of 55 us a request. Beside it, split the same way, the loop's sleeps (voluntary context
switches) and its read- and write-family system calls per event and per request: counts that
a busy machine does not blur. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

from loadtests.bench.overhead_setup import ENGINE
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload
from loadtests.bench_peers import MODEL, _named_src, _workload
from loadtests.peer_servers import nginx_available, nginx_relay
from loadtests.proc_counters import Counters, tree_total
from loadtests.processes import emulated_backend, gateway
from loadtests.results_file import fmt, write_results


@dataclass(frozen=True)
class EventCpu:
    side: str
    concurrency: int
    us_per_request_low: float  # CPU per request at --low tokens
    us_per_request_high: float
    us_per_event: float  # the slope
    us_per_request: float  # the intercept: CPU a request costs besides its events
    idle_ms_per_s: float  # CPU per second while idle
    idle_wakes_per_s: float  # voluntary context switches per second while idle: its wake-ups
    # The kernel's counts, split the same way (slope per event, intercept per request): the
    # loop's sleeps (voluntary context switches) and its read- and write-family system calls.
    switches_per_event: float = 0.0
    switches_per_request: float = 0.0
    syscalls_per_event: float = 0.0
    syscalls_per_request: float = 0.0


def split(low: int, high: int, cpu_low_us: float, cpu_high_us: float) -> tuple[float, float]:
    """(CPU per event, CPU per request) from CPU per request at two stream lengths."""
    per_event = (cpu_high_us - cpu_low_us) / (high - low)
    return per_event, cpu_low_us - per_event * low


@contextlib.asynccontextmanager
async def _sides(args: argparse.Namespace, backend_url: str) -> AsyncIterator[dict[str, Any]]:
    async with contextlib.AsyncExitStack() as stack:
        backend = {"name": "b1", "region": "local", "url": backend_url + "/v1"}
        config = {"backends": [{**backend, "models": [MODEL], "max_connections": 4096}]}
        found = {"meridian": await stack.enter_async_context(gateway(config, 1))}
        for name, src in args.src:
            env = {**os.environ, "PYTHONPATH": str(src)}
            found[f"meridian@{name}"] = await stack.enter_async_context(gateway(config, 1, env))
        if args.nginx and nginx_available():
            found["nginx"] = await stack.enter_async_context(nginx_relay(backend_url))
        yield found


async def measure(args: argparse.Namespace) -> list[EventCpu]:
    rows: list[EventCpu] = []
    lengths = (args.low, args.high)
    async with (
        emulated_backend("b1", MODEL, ENGINE) as (backend_url, _),
        _sides(args, backend_url) as sides,
    ):
        idle: dict[str, tuple[float, float]] = {}  # CPU ms and wake-ups, per second
        for name, (_, pid) in sides.items():
            before = tree_total(pid)
            await asyncio.sleep(args.idle_s)
            spent_idle = tree_total(pid).minus(before)
            idle[name] = (
                spent_idle.cpu_s / args.idle_s * 1000.0,
                spent_idle.voluntary / args.idle_s,
            )
        for concurrency in args.concurrency:
            requests = max(args.requests, concurrency * 4)
            workloads = {n: parse_workload(_workload(concurrency, requests, n)) for n in lengths}
            options = BenchOptions(max_connections=concurrency)
            spent = {(name, n): Counters() for name in sides for n in lengths}
            for url, _ in sides.values():
                await run_bench(url, workloads[args.low], options)  # warm every pool
            for round_ in range(args.rounds):
                for name, (url, pid) in sides.items():
                    for n in lengths if round_ % 2 == 0 else lengths[::-1]:
                        before = tree_total(pid)
                        await run_bench(url, workloads[n], options)
                        spent[(name, n)] = spent[(name, n)].plus(tree_total(pid).minus(before))
            done = requests * args.rounds
            for name in sides:
                low, high = spent[(name, args.low)], spent[(name, args.high)]
                low_us, high_us = low.cpu_s / done * 1e6, high.cpu_s / done * 1e6
                per_event, per_request = split(args.low, args.high, low_us, high_us)
                switches = split(args.low, args.high, low.voluntary / done, high.voluntary / done)
                syscalls = split(
                    args.low,
                    args.high,
                    (low.reads + low.writes) / done,
                    (high.reads + high.writes) / done,
                )
                rows.append(
                    EventCpu(
                        name,
                        concurrency,
                        low_us,
                        high_us,
                        per_event,
                        per_request,
                        *idle[name],
                        *switches,
                        *syscalls,
                    )
                )
    return rows


def format_table(rows: list[EventCpu], low: int, high: int) -> str:
    header = (
        f"{'':18}{'conc':>5}{f'us/req @{low}':>13}{f'us/req @{high}':>14}{'us/event':>10}"
        f"{'us/request':>12}{'idle ms/s':>11}{'wakes/s':>9}{'event / nginx':>15}"
        f"{'event / 2nd':>13}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        level = [r for r in rows if r.concurrency == row.concurrency]
        nginx = next((r.us_per_event for r in level if r.side == "nginx"), None)
        second = level[1].us_per_event if len(level) > 1 and level[1].side != "nginx" else None
        lines.append(
            f"{row.side:18}{row.concurrency:>5}{row.us_per_request_low:>13.0f}"
            f"{row.us_per_request_high:>14.0f}{row.us_per_event:>10.1f}{row.us_per_request:>12.0f}"
            f"{row.idle_ms_per_s:>11.2f}{row.idle_wakes_per_s:>9.1f}"
            f"{_ratio(row.us_per_event, nginx):>15}"
            f"{_ratio(row.us_per_event, second):>13}"
        )
    lines.append(
        f"(CPU of each side's process tree; us/event = slope between {low} and {high} tokens, "
        "us/request = intercept; '2nd' = the first --src side)"
    )
    header = (
        f"{'':18}{'conc':>5}{'switches/event':>16}{'switches/request':>18}"
        f"{'syscalls/event':>16}{'syscalls/request':>18}"
    )
    lines += ["", header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.side:18}{row.concurrency:>5}{row.switches_per_event:>16.2f}"
            f"{row.switches_per_request:>18.2f}{row.syscalls_per_event:>16.2f}"
            f"{row.syscalls_per_request:>18.2f}"
        )
    lines.append(
        "(voluntary context switches, read- and write-family system calls: /proc schedstat, "
        "status and io; split like the CPU)"
    )
    return "\n".join(lines)


def _ratio(a: float, b: float | None) -> str:
    return "-" if b is None or b <= 0 else f"{fmt(a / b)}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench_event_cpu", description=__doc__
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--requests", type=int, default=60, help="per side, length and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--low", type=int, default=8, help="output tokens of the short stream")
    parser.add_argument("--high", type=int, default=64, help="output tokens of the long stream")
    parser.add_argument("--idle-s", type=float, default=10.0, help="idle CPU window per side")
    parser.add_argument("--src", type=_named_src, action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--no-nginx", dest="nginx", action="store_false")
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    if args.high <= args.low:
        parser.error("--high must be more tokens than --low")
    import uvloop

    rows = uvloop.run(measure(args))
    print(format_table(rows, args.low, args.high))
    payload = {
        "benchmark": "event_cpu",
        "engine": ENGINE,
        "tokens": [args.low, args.high],
        "rows": [asdict(row) for row in rows],
    }
    write_results(args.out, "event-cpu", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
