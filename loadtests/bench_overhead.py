"""Gateway overhead: the same streaming workload against an emulated backend directly and
through the gateway, side by side in one run, at concurrency 1 and 64.

    python -m loadtests.bench_overhead [--requests N] [--rounds R] [--out DIR]
        [--workers 1 2] [--src before=DIR ...]

Three processes: the emulator (``meridian emulate``), the gateway (``meridian serve``) and this
load generator. Direct and gateway runs alternate (``--rounds`` times, each round starting one
side later than the one before) so machine noise and run order hit every side alike;
percentiles are taken over the pooled requests of each side. Reported: TTFT and ITL p50/p99
direct vs through the gateway, the difference (added latency), and requests/s.
``--src NAME=DIR`` adds a gateway (``--src-workers`` processes, default 1) running another
checkout's code (``PYTHONPATH``; e.g. ``git archive main`` unpacked in DIR) to every round:
before/after in the same run. ``--cpu-ledger`` prints, per side, the CPU seconds of the load
generator, the backend, each gateway process (each ``--workers`` worker apart) and the rest of
the machine (``loadtests/cpu_ledger.py``): on a shared host, how much CPU the run had to spend.
``--backend mock`` (``loadtests/mock_backend.py``, the same schedule) and ``--client lean``
(``loadtests/bench/lean_client.py``) leave more of a small host's CPU to the gateway.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from dataclasses import asdict, dataclass

from loadtests.bench.lean_client import run_lean
from loadtests.bench.overhead_setup import (
    ENGINE,
    MOCK_ITL_MS,
    MOCK_TTFT_MS,
    MODEL,
    one_backend_config,
    overhead_workload,
    src_env,
)
from loadtests.bench.records import BenchResult, RequestRecord
from loadtests.bench.report import summarize
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import Workload, parse_workload
from loadtests.cpu_ledger import CpuLedger, CpuReading, format_ledger
from loadtests.peer_servers import tree_cpu_s
from loadtests.processes import ADMIN_URLS, emulated_backend, gateway, mock_backend
from loadtests.results_file import fmt, write_results
from loadtests.worker_balance import fetch_requests_by_worker, format_balance

Run = tuple[BenchResult, float | None]  # a run and the gateway's CPU seconds in it


@dataclass(frozen=True)
class Side:
    requests: int
    errors: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    request_per_s: float
    cpu_us_per_request: float | None = None  # the gateway's process tree (None: direct)


@dataclass(frozen=True)
class Level:
    concurrency: int
    direct: Side
    gateway: Side  # the first --workers count
    by_workers: dict[int, Side] = dataclasses.field(default_factory=dict)  # every count run
    by_src: dict[str, Side] = dataclasses.field(
        default_factory=dict
    )  # other checkouts, --src-workers each
    # --cpu-ledger: per side, the CPU of every process of the run and of the rest of the machine
    cpu: dict[str, CpuReading] = dataclasses.field(default_factory=dict)
    # --cpu-ledger: requests each worker of a --workers N > 1 gateway served since it started
    balance: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    def added(self, field: str, side: Side | None = None) -> float | None:
        a, b = getattr(self.direct, field), getattr(side or self.gateway, field)
        return None if a is None or b is None else b - a


def _side(results: list[BenchResult], cpu_s: float | None = None) -> Side:
    records: tuple[RequestRecord, ...] = tuple(r for result in results for r in result.records)
    merged = dataclasses.replace(
        results[0],
        records=records,
        duration_s=sum(r.duration_s for r in results),
        loop_lag_s=tuple(lag for r in results for lag in r.loop_lag_s),
    )
    report = summarize(merged)
    return Side(
        requests=report.requests,
        errors=report.requests - report.ok,
        ttft_p50_ms=report.ttft_ms.p50,
        ttft_p99_ms=report.ttft_ms.p99,
        itl_p50_ms=report.itl_ms.p50,
        itl_p99_ms=report.itl_ms.p99,
        request_per_s=report.request_per_s,
        cpu_us_per_request=None if cpu_s is None else cpu_s / max(len(records), 1) * 1e6,
    )


async def _timed(
    url: str, workload: Workload, options: BenchOptions, pid: int | None, lean: bool = False
) -> Run:
    """One run, and the CPU seconds the gateway's process tree spent in it (None: direct);
    ``lean``: through ``run_lean`` (bare connections) instead of ``run_bench`` (aiohttp)."""
    before = tree_cpu_s(pid) if pid is not None else 0.0
    result = await (run_lean(url, workload) if lean else run_bench(url, workload, options))
    return result, (tree_cpu_s(pid) - before if pid is not None else None)


def _merged(runs: list[Run]) -> Side:
    cpu = [c for _, c in runs if c is not None]
    return _side([r for r, _ in runs], sum(cpu) if cpu else None)


async def measure(
    concurrencies: list[int],
    requests: int,
    rounds: int,
    workers: list[int] | None = None,
    sources: dict[str, str] | None = None,
    ledger: bool = False,
    backend: str = "emulator",
    client: str = "aiohttp",
    src_workers: int = 1,
) -> list[Level]:
    counts = workers or [1]
    sources = sources or {}
    levels = []
    async with (
        (
            mock_backend(MODEL, MOCK_TTFT_MS, MOCK_ITL_MS)
            if backend == "mock"
            else emulated_backend("overhead", MODEL, ENGINE)
        ) as (backend_url, backend_pid),
        contextlib.AsyncExitStack() as stack,
    ):
        config = one_backend_config("overhead", backend_url)
        gateways = {n: await stack.enter_async_context(gateway(config, n)) for n in counts}
        src_gateways = {
            name: await stack.enter_async_context(gateway(config, src_workers, src_env(src)))
            for name, src in sources.items()
        }
        urls = {n: url for n, (url, _) in gateways.items()}
        src_urls = {name: url for name, (url, _) in src_gateways.items()}
        pids = {url: pid for url, pid in [*gateways.values(), *src_gateways.values()]}
        names = {
            backend_url: "direct",
            **{url: f"gw x{n}" for n, url in urls.items()},
            **{url: name for name, url in src_urls.items()},
        }
        roots = {"emulator": backend_pid, **{names[url]: pid for url, pid in pids.items()}}
        cpu = CpuLedger(roots) if ledger else None
        for concurrency in concurrencies:
            workload = parse_workload(
                overhead_workload(concurrency, max(requests, concurrency * 4))
            )
            options = BenchOptions(max_connections=concurrency)
            lean = client == "lean"
            for url in [*urls.values(), *src_urls.values()]:
                await _timed(url, workload, options, None, lean)  # warm every pool
            direct: list[Run] = []
            through: dict[int, list[Run]] = {n: [] for n in counts}
            others: dict[str, list[Run]] = {name: [] for name in src_urls}
            runs: list[tuple[str, list[Run]]] = [(backend_url, direct)]
            runs += [(url, through[n]) for n, url in urls.items()]
            runs += [(url, others[name]) for name, url in src_urls.items()]
            spent: dict[str, CpuReading] = {}
            for turn in range(rounds):
                # Each round starts one side later: no side always runs first (or last).
                for url, results in runs[turn % len(runs) :] + runs[: turn % len(runs)]:
                    before = cpu.read() if cpu else None
                    results.append(await _timed(url, workload, options, pids.get(url), lean))
                    if cpu and before:
                        used = cpu.read().minus(before)
                        earlier = spent.get(names[url])
                        spent[names[url]] = used if earlier is None else earlier.plus(used)
            sides = {n: _merged(results) for n, results in through.items()}
            by_src = {name: _merged(results) for name, results in others.items()}
            multi = [url for n, url in urls.items() if n > 1]
            multi += list(src_urls.values()) if src_workers > 1 else []
            balance = (
                {names[url]: await fetch_requests_by_worker(ADMIN_URLS[url]) for url in multi}
                if cpu
                else {}
            )
            levels.append(
                Level(concurrency, _merged(direct), sides[counts[0]], sides, by_src, spent, balance)
            )
    return levels


def format_table(levels: list[Level]) -> str:
    header = (
        f"{'conc':>5} {'side':>10} {'reqs':>6} {'err':>4} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'ITL p50':>8} {'ITL p99':>8} {'req/s':>8} {'cpu us/req':>10}"
    )
    lines = [header, "-" * len(header)]
    for level in levels:
        counts = level.by_workers or {1: level.gateway}
        sides = {_label(n, len(counts)): side for n, side in counts.items()}
        sides.update(level.by_src)
        labelled = [("direct", level.direct), *sides.items()]
        for label, side in labelled:
            lines.append(
                f"{level.concurrency:>5} {label:>10} {side.requests:>6} {side.errors:>4} "
                f"{fmt(side.ttft_p50_ms):>9} {fmt(side.ttft_p99_ms):>9} "
                f"{fmt(side.itl_p50_ms):>8} {fmt(side.itl_p99_ms):>8} {side.request_per_s:>8.1f} "
                f"{fmt(side.cpu_us_per_request, 0):>10}"
            )
        for label, side in sides.items():
            lines.append(
                f"{level.concurrency:>5} {'+' + label:>10} {'':>6} {'':>4} "
                f"{fmt(level.added('ttft_p50_ms', side)):>9} "
                f"{fmt(level.added('ttft_p99_ms', side)):>9} "
                f"{fmt(level.added('itl_p50_ms', side)):>8} "
                f"{fmt(level.added('itl_p99_ms', side)):>8} "
                f"{fmt(side.request_per_s / level.direct.request_per_s, 3):>8}x"
            )
    lines.append(
        "(all times ms; '+' rows = gateway - direct; last column = gateway/direct req/s; "
        "cpu = the gateway's process tree per request)"
    )
    return "\n".join(lines)


_ADDED = ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")


def _side_requests(level: Level, side: str) -> int:
    if side == "direct":
        return level.direct.requests
    if side.startswith("gw x") and int(side[4:]) in level.by_workers:
        return level.by_workers[int(side[4:])].requests
    return level.by_src[side].requests if side in level.by_src else level.gateway.requests


def _label(workers: int, sides: int) -> str:
    return "gateway" if sides == 1 else f"gw x{workers}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_overhead", description=__doc__)
    parser.add_argument(
        "--concurrency", type=int, action="append", help="repeatable; default 1, 64"
    )
    parser.add_argument("--requests", type=int, default=200, help="requests per side per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[1],
        help="gateway worker counts to compare, each its own gateway (e.g. 1 2)",
    )
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="also a gateway (--src-workers) running the code in DIR, in every round",
    )
    parser.add_argument(
        "--src-workers",
        type=int,
        default=1,
        help="worker processes of each --src gateway (default 1)",
    )
    parser.add_argument(
        "--cpu-ledger",
        action="store_true",
        help="per side, CPU seconds of the load generator, the emulator, each gateway process "
        "(every --workers worker apart) and the rest of the machine",
    )
    parser.add_argument(
        "--backend",
        choices=["emulator", "mock"],
        default="emulator",
        help="mock: loadtests/mock_backend.py (same schedule, a fraction of the CPU)",
    )
    parser.add_argument(
        "--client",
        choices=["aiohttp", "lean"],
        default="aiohttp",
        help="lean: bare keep-alive connections (loadtests/bench/lean_client.py), less CPU",
    )
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    import uvloop

    sources = {name: src for name, _, src in (s.partition("=") for s in args.src)}
    levels = uvloop.run(
        measure(
            args.concurrency or [1, 64],
            args.requests,
            args.rounds,
            args.workers,
            sources,
            args.cpu_ledger,
            args.backend,
            args.client,
            args.src_workers,
        )
    )
    print(format_table(levels))
    for level in levels:
        for side, used in level.cpu.items():
            requests = _side_requests(level, side)
            print(format_ledger(f"c={level.concurrency} {side}", used, requests))
        for side, counts in level.balance.items():
            print(format_balance(f"c={level.concurrency} {side}", counts))
    payload = {
        "benchmark": "gateway_overhead",
        "load_average": os.getloadavg(),
        "sources": sources,
        "src_workers": args.src_workers,
        "engine": ENGINE,
        "backend": args.backend,
        "client": args.client,
        "levels": [
            {
                **{
                    k: v
                    for k, v in asdict(level).items()
                    if k not in {"by_workers", "by_src", "cpu", "balance"}
                },
                "cpu_s": {side: dict(used.by_label) for side, used in level.cpu.items()},
                "cpu_wall_s": {side: used.wall for side, used in level.cpu.items()},
                "requests_by_worker": level.balance,
                "added": {f: level.added(f) for f in _ADDED},
                "by_workers": {
                    str(n): {**asdict(side), "added": {f: level.added(f, side) for f in _ADDED}}
                    for n, side in level.by_workers.items()
                },
                "by_src": {
                    name: {**asdict(side), "added": {f: level.added(f, side) for f in _ADDED}}
                    for name, side in level.by_src.items()
                },
            }
            for level in levels
        ],
    }
    write_results(args.out, "overhead", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
