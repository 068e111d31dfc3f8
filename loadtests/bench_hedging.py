"""Hedging on vs off under a backend that stalls 5% of first tokens: p99 TTFT and extra load.

    python -m loadtests.bench_hedging [--requests N] [--rounds R] [--concurrency C] [--out DIR]

Processes: two emulated backends (``meridian emulate``) — the preferred one (near) stalls
``--stall-ms`` before the first token on 5% of requests; the other is 20 ms further away, so
the predicted-TTFT policy ranks it second — and two gateways (``meridian serve``), identical
but for ``hedging.enabled``. Rounds alternate off/on; before each run both emulators are reset
(same seed: the same requests stall on both sides). Reported: TTFT p50/p99 per side, the p99
ratio (off / on), extra upstream requests in % of client requests (from the emulators' own
counts), and how many of the losers the emulators saw cancelled.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp
import orjson

from loadtests.bench.records import BenchResult, RequestRecord
from loadtests.bench.report import summarize
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload
from loadtests.processes import emulated_backend, gateway
from loadtests.results_file import fmt, write_results

MODEL = "hedging-model"
ENGINE = {
    "max_num_seqs": 1024,
    "prefill_tokens_per_s": 1e9,
    "decode_base_ms": 5,
    "decode_per_seq_ms": 0,
    "first_token_overhead_ms": 10,
}
FAR_RTT_MS = 20.0


@dataclass(frozen=True)
class Side:
    policy: str
    hedging: bool
    requests: int
    errors: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    upstream_requests: int
    upstream_cancelled: int

    @property
    def extra_pct(self) -> float:
        return 100.0 * (self.upstream_requests - self.requests) / max(1, self.requests)


def _workload(concurrency: int, requests: int) -> dict[str, object]:
    return {
        "name": f"hedging-c{concurrency}",
        "seed": 11,
        "model": MODEL,
        "arrival": {"mode": "closed", "concurrency": concurrency},
        "limits": {"requests": requests},
        "request_timeout_s": 60,
        "mix": [{"kind": "chat", "user_tokens": 64, "max_tokens": 16}],
    }


def _gateway_config(near: str, far: str, hedging: bool, policy: str) -> dict[str, Any]:
    return {
        "routing": {"policy": policy},
        "regions": [{"name": "near", "rtt_ms": 0.0}, {"name": "far", "rtt_ms": FAR_RTT_MS}],
        "backends": [
            {"name": "near", "region": "near", "url": near + "/v1", "models": [MODEL]},
            {"name": "far", "region": "far", "url": far + "/v1", "models": [MODEL]},
        ],
        "hedging": {"enabled": hedging},
        "reload": {"watch_interval_s": None},
    }


async def _admin(http: aiohttp.ClientSession, urls: list[str], action: str) -> list[dict[str, int]]:
    out = []
    for url in urls:
        method = http.post if action == "reset" else http.get
        async with method(f"{url}/admin/{action}") as response:
            out.append(orjson.loads(await response.read()))
    return out


def _side(
    policy: str, hedging: bool, results: list[BenchResult], upstream: int, cancelled: int
) -> Side:
    records: tuple[RequestRecord, ...] = tuple(r for result in results for r in result.records)
    merged = dataclasses.replace(
        results[0], records=records, duration_s=sum(r.duration_s for r in results)
    )
    report = summarize(merged)
    return Side(
        policy=policy,
        hedging=hedging,
        requests=report.requests,
        errors=report.requests - report.ok,
        ttft_p50_ms=report.ttft_ms.p50,
        ttft_p99_ms=report.ttft_ms.p99,
        upstream_requests=upstream,
        upstream_cancelled=cancelled,
    )


async def measure(
    policy: str, requests: int, rounds: int, concurrency: int, stall_ms: float
) -> tuple[Side, Side]:
    faults = {"stall_rate": 0.05, "stall_ms": stall_ms}
    async with (
        emulated_backend("near", MODEL, ENGINE, faults, ["--seed", "5"]) as (near, _),
        emulated_backend("far", MODEL, ENGINE, None, ["--rtt-ms", str(FAR_RTT_MS)]) as (far, _),
        gateway(_gateway_config(near, far, False, policy)) as (plain_url, _),
        gateway(_gateway_config(near, far, True, policy)) as (hedged_url, _),
        aiohttp.ClientSession() as http,
    ):
        workload = parse_workload(_workload(concurrency, requests))
        options = BenchOptions(max_connections=concurrency)
        warm = parse_workload(_workload(concurrency, concurrency * 4))
        for url in (plain_url, hedged_url):
            await run_bench(url, warm, options)
        totals = {False: [0, 0], True: [0, 0]}
        results: dict[bool, list[BenchResult]] = {False: [], True: []}
        for _ in range(rounds):
            for hedging, url in ((False, plain_url), (True, hedged_url)):
                await _admin(http, [near, far], "reset")
                results[hedging].append(await run_bench(url, workload, options))
                await asyncio.sleep(0.3)  # let cancellations land before counting
                stats = await _admin(http, [near, far], "stats")
                totals[hedging][0] += sum(s["requests"] for s in stats)
                totals[hedging][1] += sum(s["cancelled"] for s in stats)
    plain = _side(policy, False, results[False], *totals[False])
    hedged = _side(policy, True, results[True], *totals[True])
    return plain, hedged


def format_table(pairs: list[tuple[Side, Side]]) -> str:
    lines = [
        f"{'policy':>15} {'hedging':>7} {'reqs':>5} {'err':>4} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'upstream':>8} {'extra %':>7} {'cancelled':>9} {'p99 off/on':>10}",
        "-" * 92,
    ]
    for plain, hedged in pairs:
        for side in (plain, hedged):
            ratio = fmt(_ratio(plain, hedged), 2) + "x" if side.hedging else ""
            lines.append(
                f"{side.policy:>15} {'on' if side.hedging else 'off':>7} {side.requests:>5} "
                f"{side.errors:>4} {fmt(side.ttft_p50_ms, 1):>9} {fmt(side.ttft_p99_ms, 1):>9} "
                f"{side.upstream_requests:>8} {fmt(side.extra_pct, 1):>7} "
                f"{side.upstream_cancelled:>9} {ratio:>10}"
            )
    lines.append("goal: p99 TTFT off/on >= 5x with <= 10% extra upstream requests")
    lines.append("(times ms; 'extra %' = upstream requests beyond one per client request)")
    return "\n".join(lines)


def _ratio(plain: Side, hedged: Side) -> float | None:
    if plain.ttft_p99_ms is None or not hedged.ttft_p99_ms:
        return None
    return plain.ttft_p99_ms / hedged.ttft_p99_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_hedging", description=__doc__)
    parser.add_argument("--requests", type=int, default=400, help="requests per side per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--stall-ms", type=float, default=1000.0)
    parser.add_argument(
        "--policy", action="append", help="routing policy (repeatable; default round_robin)"
    )
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    import uvloop

    pairs = [
        uvloop.run(measure(policy, args.requests, args.rounds, args.concurrency, args.stall_ms))
        for policy in args.policy or ["round_robin"]
    ]
    print(format_table(pairs))
    payload = {
        "benchmark": "hedging",
        "engine": ENGINE,
        "stall": {"rate": 0.05, "ms": args.stall_ms},
        "requests_per_side": args.requests * args.rounds,
        "concurrency": args.concurrency,
        "results": [
            {
                "policy": plain.policy,
                "sides": [{**asdict(s), "extra_pct": s.extra_pct} for s in (plain, hedged)],
                "p99_ttft_ratio": _ratio(plain, hedged),
            }
            for plain, hedged in pairs
        ],
    }
    write_results(args.out, "hedging", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
