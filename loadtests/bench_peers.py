"""Meridian beside the proxies people use today, in one run anyone can repeat.

    python -m loadtests.bench_peers [--concurrency 1 32] [--requests 200] [--rounds 2]
        [--peers meridian meridian-aiohttp litellm nginx python-relay aiohttp-relay]
        [--litellm-version 1.108.7]
        [--out DIR] [--meridian-src NAME=DIR ...]

One emulated backend (TTFT 20 ms, 32 tokens at 5 ms), one streaming load generator, and in front
of the backend: nothing (direct), Meridian (``meridian serve``, one worker; meridian-aiohttp:
the same with ``door.lean: false``, its requests read by aiohttp's server), the LiteLLM proxy
(installed into a virtual environment of its own by this script, one worker, latency-based
routing), nginx (Debian's; a byte relay with buffering off: the floor), python-relay
(``loadtests/python_relay.py``: the same byte relay in Python on uvloop, the floor of a relay
in the interpreter, so the table tells the language's share from the gateway's) and
aiohttp-relay (the same behind aiohttp's web server, which Meridian's HTTP door runs on). Sides
alternate within each round so machine noise hits them alike; percentiles pool each side's
rounds. Reported per side and concurrency: added TTFT p50/p99 and added ITL p99 (side -
direct), throughput / direct, and CPU per relayed token event (the proxy's process-tree CPU
seconds during its runs ÷ token events relayed), with ratios against LiteLLM and nginx. ``--meridian-src base=/tmp/main`` adds
a Meridian side ``meridian@base`` running that checkout's code (``PYTHONPATH``), so a change is
measured against its baseline in the same run. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadtests.bench.overhead_setup import ENGINE  # the overhead benchmark's engine
from loadtests.bench.records import BenchResult
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload
from loadtests.bench_overhead import Side, _side
from loadtests.peer_servers import (
    DEFAULT_VENVS,
    cpu_meter,
    litellm_proxy,
    litellm_python,
    nginx_available,
    nginx_relay,
    python_relay,
)
from loadtests.processes import emulated_backend, gateway
from loadtests.results_file import fmt, write_results

MODEL = "peers-model"
TOKENS = 32


@dataclass(frozen=True)
class PeerSide:
    peer: str
    concurrency: int
    side: Side
    added_ttft_p50_ms: float | None
    added_ttft_p99_ms: float | None
    added_itl_p99_ms: float | None
    throughput_vs_direct: float
    cpu_us_per_event: float | None  # None: direct (no proxy)
    # Each round's added TTFT p99 against direct's in the same round: the spread says whether
    # a difference between two sides is this host's noise (pooled p99s of one code have
    # moved by 2x between runs at c=32).
    added_ttft_p99_by_round_ms: tuple[float | None, ...] = ()


def _workload(concurrency: int, requests: int, tokens: int = TOKENS) -> dict[str, object]:
    return {
        "name": f"peers-c{concurrency}",
        "seed": 11,
        "model": MODEL,
        "arrival": {"mode": "closed", "concurrency": concurrency},
        "limits": {"requests": requests},
        "request_timeout_s": 120,
        "mix": [{"kind": "chat", "user_tokens": 64, "max_tokens": tokens}],
    }


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


@contextlib.asynccontextmanager
async def _peers(
    args: argparse.Namespace, backend_url: str
) -> AsyncIterator[dict[str, tuple[str, int]]]:
    """Base URL and charged pid of every peer that could be started."""
    wanted, venvs, litellm_version = args.peers, args.venvs, args.litellm_version
    async with contextlib.AsyncExitStack() as stack:
        found: dict[str, tuple[str, int]] = {}
        backend = {"name": "b1", "region": "local", "url": backend_url + "/v1"}
        config = {"backends": [{**backend, "models": [MODEL], "max_connections": 4096}]}
        if "meridian" in wanted:
            found["meridian"] = await stack.enter_async_context(gateway(config, 1))
        if "meridian-aiohttp" in wanted:  # the same code, its HTTP door on aiohttp's server
            aiohttp_door = {**config, "door": {"lean": False}}
            found["meridian-aiohttp"] = await stack.enter_async_context(gateway(aiohttp_door, 1))
        for name, src in args.meridian_src:
            env = {**os.environ, "PYTHONPATH": str(src)}
            found[f"meridian@{name}"] = await stack.enter_async_context(gateway(config, 1, env))
        if "litellm" in wanted:
            python = litellm_python(venvs, litellm_version)
            if python is not None:
                proxy = litellm_proxy(python, backend_url, MODEL)
                found["litellm"] = await stack.enter_async_context(proxy)
        if "nginx" in wanted:
            if nginx_available():
                found["nginx"] = await stack.enter_async_context(nginx_relay(backend_url))
            else:
                print("bench_peers: nginx not found (apt-get install nginx-light); skipped")
        for kind, peer in (("protocol", "python-relay"), ("aiohttp", "aiohttp-relay")):
            if peer in wanted:
                found[peer] = await stack.enter_async_context(python_relay(backend_url, kind))
        yield found


async def measure(args: argparse.Namespace) -> list[PeerSide]:
    rows: list[PeerSide] = []
    async with (
        emulated_backend("b1", MODEL, ENGINE) as (backend_url, _),
        _peers(args, backend_url) as peers,
    ):
        sides = {"direct": (backend_url, 0), **peers}
        for concurrency in args.concurrency:
            workload = parse_workload(
                _workload(concurrency, max(args.requests, concurrency * 4), args.tokens)
            )
            options = BenchOptions(max_connections=concurrency)
            results: dict[str, list[BenchResult]] = {name: [] for name in sides}
            cpu: dict[str, float] = dict.fromkeys(sides, 0.0)
            for url, _ in sides.values():
                await run_bench(url, workload, options)  # warm every pool
            for _ in range(args.rounds):
                for name, (url, pid) in sides.items():
                    with cpu_meter(pid or None) as spent:
                        results[name].append(await run_bench(url, workload, options))
                    cpu[name] += spent[0]
            rows += _level(concurrency, results, cpu)
    return rows


def _level(
    concurrency: int, results: dict[str, list[BenchResult]], cpu: dict[str, float]
) -> list[PeerSide]:
    direct = _side(results["direct"])
    direct_p99_by_round = [_side([run]).ttft_p99_ms for run in results["direct"]]
    rows = []
    for name, runs in results.items():
        side = _side(runs)
        events = sum(len(r.token_times_s) for run in runs for r in run.records if r.ok)
        by_round = tuple(
            _minus(_side([run]).ttft_p99_ms, alike)
            for run, alike in zip(runs, direct_p99_by_round, strict=True)
        )
        rows.append(
            PeerSide(
                peer=name,
                concurrency=concurrency,
                side=side,
                added_ttft_p50_ms=_minus(side.ttft_p50_ms, direct.ttft_p50_ms),
                added_ttft_p99_ms=_minus(side.ttft_p99_ms, direct.ttft_p99_ms),
                added_itl_p99_ms=_minus(side.itl_p99_ms, direct.itl_p99_ms),
                throughput_vs_direct=side.request_per_s / direct.request_per_s,
                cpu_us_per_event=None if name == "direct" else cpu[name] / max(events, 1) * 1e6,
                added_ttft_p99_by_round_ms=by_round,
            )
        )
    return rows


def _spread(values: tuple[float | None, ...]) -> str:
    """``low..high`` of the rounds' values ("-" with fewer than two)."""
    known = [value for value in values if value is not None]
    return f"{min(known):.1f}..{max(known):.1f}" if len(known) > 1 else "-"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b <= 0 else f"{a / b:.2f}x"


def format_table(rows: list[PeerSide]) -> str:
    head = (
        f"{'':<18}{'conc':>5}{'err':>5}{'+TTFT p50':>11}{'+TTFT p99':>11}{'p99 by round':>15}"
        f"{'+ITL p99':>10}"
        f"{'thru/direct':>13}{'CPU us/event':>14}{'TTFT p50 / litellm':>20}{'CPU / nginx':>13}"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        level = {r.peer: r for r in rows if r.concurrency == row.concurrency}
        direct = row.peer == "direct"
        litellm = level["litellm"].added_ttft_p50_ms if "litellm" in level and not direct else None
        nginx = level["nginx"].cpu_us_per_event if "nginx" in level else None
        lines.append(
            f"{row.peer:<18}{row.concurrency:>5}{row.side.errors:>5}"
            f"{fmt(row.added_ttft_p50_ms):>11}{fmt(row.added_ttft_p99_ms):>11}"
            f"{_spread(row.added_ttft_p99_by_round_ms):>15}{fmt(row.added_itl_p99_ms):>10}{row.throughput_vs_direct:>12.3f}x"
            f"{fmt(row.cpu_us_per_event, 1):>14}"
            f"{_ratio(row.added_ttft_p50_ms, litellm):>20}"
            f"{_ratio(row.cpu_us_per_event, nginx):>13}"
        )
    lines.append(
        "(ms; '+' = side - direct, pooled over the rounds; p99 by round: the lowest and highest "
        "round's, each against direct's in that round; CPU = the proxy's process tree ÷ token "
        "events relayed)"
    )
    return "\n".join(lines)


def _named_src(text: str) -> tuple[str, Path]:
    name, sep, src = text.partition("=")
    if not sep or not name or not (Path(src) / "gateway" / "cli.py").is_file():
        raise argparse.ArgumentTypeError(f"expected NAME=DIR of a Meridian checkout, got {text!r}")
    return name, Path(src).resolve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_peers", description=__doc__)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--requests", type=int, default=200, help="per side per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--tokens",
        type=int,
        default=TOKENS,
        help="output tokens per request; long streams leave per-event CPU, not per-request",
    )
    parser.add_argument(
        "--peers",
        nargs="+",
        default=["meridian", "litellm", "nginx", "python-relay", "aiohttp-relay"],
    )
    parser.add_argument("--litellm-version", help="pip version of litellm[proxy] (default: latest)")
    parser.add_argument("--venvs", type=Path, default=DEFAULT_VENVS, help="where peer venvs live")
    parser.add_argument(
        "--meridian-src",
        type=_named_src,
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="also run Meridian from another checkout (e.g. base=/tmp/main), as meridian@NAME",
    )
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    import uvloop

    rows = uvloop.run(measure(args))
    print(format_table(rows))
    payload: dict[str, Any] = {
        "benchmark": "peers",
        "engine": ENGINE,
        "output_tokens": args.tokens,
        "rows": [{**asdict(r), "side": dataclasses.asdict(r.side)} for r in rows],
    }
    write_results(args.out, "peers", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
