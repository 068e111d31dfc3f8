"""Where the slowest first tokens' time went, by the gateway's own ``Server-Timing`` entries.

    python -m loadtests.timing_tail [--concurrency 32] [--requests 2000] [--slowest 10]
        [--workers 1] [--lengths 16 16] [--src NAME=DIR ... --rounds 3] [--out loadtests/results]

The overhead benchmarks give the added TTFT as one difference of two distributions; this splits
it. Three processes, as in ``bench_overhead --backend mock --client lean``: the mock backend
(TTFT 20 ms, 5 ms a token), ``meridian serve`` (``--workers``, 1 by default) and this load
generator. A warm-up, then the same closed workload through the gateway and straight to the
backend. Printed: TTFT p50/p99 both ways; per ``Server-Timing`` entry of the gateway's answers
(``gw``: the gateway's own part of the TTFT; ``route``: the decision; ``upstream_ttfb``: the
backend's first byte as the gateway saw it) its p50, p99 and max; and the slowest requests with
every entry and when each was sent. A slow request whose ``gw`` is small waited on the backend;
a cluster of them sent within a few ms of each other, with the backend slow as well, is the
machine stalling everything at once, not the gateway.

``outside`` is the client's TTFT less the gateway's ``ttft`` entry (its head read -> its first
byte written): the time the request spent where the gateway's clock does not run. That is the
head waiting to be read — the loop busy with other requests' work, or the process waiting for
a core — and the first byte's way back to the client (~0.6 ms p50 here, on loopback,
including the client's own parse). At c=32 it is most of the added TTFT's tail: a head waits
behind the work queued ahead of it on a loop ~60% busy. The gateway's scheduler counters over
the measured run tell that apart from waiting for a core: the share of the run it was on a
CPU, the share it was runnable but waiting for one, and its CPU a request. With one answer
length (``--lengths 16 16``, the default) a closed loop's users run in phase and their heads
come in waves; ``--lengths 8 24`` draws the lengths from a range, and the waves go
(docs/results/perf-issue16.md, "Session 25").

``--src NAME=DIR`` measures another checkout's gateway (its ``PYTHONPATH``) as well: each of
``--rounds`` rounds runs every side once, in turn, each with its own backend and gateway
processes, and each side's figures pool its rounds. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from gateway.timing import parse
from loadtests.bench.lean_client import run_lean
from loadtests.bench.overhead_setup import MODEL, one_backend_config, overhead_workload
from loadtests.bench.records import RequestRecord
from loadtests.bench.stats import percentile
from loadtests.bench.workload import parse_workload
from loadtests.probed_gateway import checkouts
from loadtests.proc_counters import Counters, tree_total
from loadtests.processes import gateway, mock_backend
from loadtests.results_file import fmt, write_results

OUTSIDE = "outside"  # derived: the client's TTFT less the gateway's ``ttft`` entry


def entry_durations(record: RequestRecord) -> dict[str, float]:
    """The ``dur`` of every entry of ``record``'s ``Server-Timing`` header, by name."""
    header = record.server_timing or ""
    return {e.name: e.dur_ms for e in parse(header) if e.dur_ms is not None}


def outside_ms(record: RequestRecord) -> float | None:
    """The client's TTFT less the gateway's own (its ``ttft`` entry): before the head was read,
    and the first byte's way back."""
    own = entry_durations(record).get("ttft")
    if own is None or record.ttft_s is None:
        return None
    return record.ttft_s * 1000.0 - own


def ttfts_ms(records: list[RequestRecord]) -> list[float]:
    return [r.ttft_s * 1000.0 for r in records if r.ttft_s is not None and r.error is None]


@dataclass(frozen=True)
class GatewayRun:
    """The gateway's process tree over the measured run, by the scheduler's counters
    (``loadtests.proc_counters``): whether a head waited for the gateway's loop (busy with
    other requests) or for a core (the backend and the client had both)."""

    wall_s: float
    spent: Counters  # on a CPU, runnable but waiting for one, the loop's sleeps

    def plus(self, other: GatewayRun) -> GatewayRun:
        return GatewayRun(self.wall_s + other.wall_s, self.spent.plus(other.spent))

    def summary(self) -> dict[str, float]:
        cpu_s, wait_s, wakes = self.spent.cpu_s, self.spent.wait_s, self.spent.voluntary
        return {
            "busy_share": cpu_s / self.wall_s if self.wall_s else 0.0,
            "waited_share": wait_s / self.wall_s if self.wall_s else 0.0,
            "wait_per_wake_us": wait_s / wakes * 1e6 if wakes else 0.0,
        }


async def measure(
    concurrency: int,
    requests: int,
    env: dict[str, str] | None = None,
    workers: int = 1,
    lengths: tuple[int, int] = (16, 16),
) -> tuple[list[RequestRecord], list[float], GatewayRun]:
    """The gateway's records, the direct TTFTs (ms) of the same workload and the gateway's
    counters over its run (``env``: the gateway's environment, e.g. another checkout's
    ``PYTHONPATH``; ``workers``: ``meridian serve --workers``; ``lengths``: the answers'
    lengths, min and max)."""
    async with mock_backend(MODEL) as (backend_url, _):
        config = one_backend_config("b1", backend_url)
        async with gateway(config, workers, env=env) as (url, pid):
            warm = parse_workload(
                overhead_workload(concurrency, max(concurrency * 4, 100), lengths)
            )
            await run_lean(url, warm)
            workload = parse_workload(overhead_workload(concurrency, requests, lengths))
            before, started = tree_total(pid), time.perf_counter()
            through = await run_lean(url, workload)
            spent, wall = tree_total(pid).minus(before), time.perf_counter() - started
            direct = await run_lean(backend_url, workload)
    run = GatewayRun(wall, spent)
    return list(through.records), ttfts_ms(list(direct.records)), run


def report(
    records: list[RequestRecord], direct_ms: list[float], slowest: int, run: GatewayRun
) -> dict[str, Any]:
    answered = [r for r in records if r.ttft_s is not None and r.error is None]
    gateway_ms = ttfts_ms(answered)
    by_entry: dict[str, list[float]] = {}
    for record in answered:
        for name, dur in entry_durations(record).items():
            by_entry.setdefault(name, []).append(dur)
        outside = outside_ms(record)
        if outside is not None:
            by_entry.setdefault(OUTSIDE, []).append(outside)
    entries = {
        name: {"p50": percentile(values, 50), "p99": percentile(values, 99), "max": max(values)}
        for name, values in sorted(by_entry.items())
    }
    tail = sorted(answered, key=lambda r: r.ttft_s or 0.0)[-slowest:] if slowest > 0 else []
    return {
        "requests": len(records), "errors": len(records) - len(answered),
        "ttft_ms": {
            "direct": {"p50": percentile(direct_ms, 50), "p99": percentile(direct_ms, 99)},
            "gateway": {"p50": percentile(gateway_ms, 50), "p99": percentile(gateway_ms, 99)},
        },
        "entries_ms": entries,
        "gateway_process": {
            **run.summary(), "cpu_per_request_us": run.spent.cpu_s / max(len(records), 1) * 1e6,
        },
        "slowest": [
            {"ttft_ms": (r.ttft_s or 0.0) * 1000.0, "sent_s": r.sent_s,
             "entries_ms": {**entry_durations(r), OUTSIDE: outside_ms(r)}}
            for r in tail
        ],
    }  # fmt: skip


def print_report(summary: dict[str, Any], side: str = "") -> None:
    ttft = summary["ttft_ms"]
    print(
        f"{side + ': ' if side else ''}requests {summary['requests']}, errors {summary['errors']}"
    )
    for side in ("direct", "gateway"):
        print(f"TTFT {side:<8} p50 {fmt(ttft[side]['p50']):>8}  p99 {fmt(ttft[side]['p99']):>8}")
    process = summary["gateway_process"]
    print(
        f"gateway: on a CPU {process['busy_share']:.0%} of the run (of one core), runnable but"
        f" waiting for one {process['waited_share']:.1%} ({process['wait_per_wake_us']:.0f} us"
        f" a wake-up); {process['cpu_per_request_us']:.0f} us of CPU a request"
    )
    print(f"\n{'entry':<22}{'p50':>10}{'p99':>10}{'max':>10}   (ms)")
    for name, cut in summary["entries_ms"].items():
        print(f"{name:<22}{fmt(cut['p50'], 3):>10}{fmt(cut['p99'], 3):>10}{fmt(cut['max'], 3):>10}")
    print("\nslowest first tokens (ms; sent: seconds into the run)")
    for row in summary["slowest"]:
        parts = ", ".join(
            f"{name} {dur:.2f}" for name, dur in row["entries_ms"].items() if dur is not None
        )
        print(f"ttft {row['ttft_ms']:7.2f}  sent {row['sent_s']:7.3f}  {parts}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.timing_tail", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--slowest", type=int, default=10, help="requests listed one by one")
    parser.add_argument("--src", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="meridian serve --workers")
    parser.add_argument(
        "--lengths", type=int, nargs=2, default=(16, 16), metavar=("MIN", "MAX"),
        help="answer lengths drawn from MIN..MAX tokens (one length keeps the users in phase)",
    )  # fmt: skip
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    import uvloop

    sides = checkouts(args.src)
    pooled: dict[str, tuple[list[RequestRecord], list[float]]] = {n: ([], []) for n, _ in sides}
    runs = {name: GatewayRun(0.0, Counters()) for name, _ in sides}
    for _ in range(args.rounds):
        for name, env in sides:
            records, direct_ms, run = uvloop.run(
                measure(args.concurrency, args.requests, env, args.workers, tuple(args.lengths))
            )
            pooled[name][0].extend(records)
            pooled[name][1].extend(direct_ms)
            runs[name] = runs[name].plus(run)
    summaries = {name: report(*pooled[name], args.slowest, runs[name]) for name, _ in sides}
    for name, summary in summaries.items():
        print_report(summary, name if len(sides) > 1 else "")
        print()
    meta = {"concurrency": args.concurrency, "requests": args.requests, "backend": "mock",
            "rounds": args.rounds, "src": args.src, "workers": args.workers,
            "lengths": args.lengths}  # fmt: skip
    write_results(args.out, "timing-tail", {"meta": meta, **summaries["this checkout"],
                                             "sides": summaries})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
