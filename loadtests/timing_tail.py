"""Where the slowest first tokens' time went, by the gateway's own ``Server-Timing`` entries.

    python -m loadtests.timing_tail [--concurrency 32] [--requests 2000] [--slowest 10]
        [--out loadtests/results]

The overhead benchmarks give the added TTFT as one difference of two distributions; this
splits it. Three processes, as in ``bench_overhead --backend mock --client lean``: the mock
backend (TTFT 20 ms, 5 ms a token), one ``meridian serve`` worker and this load generator. A
warm-up, then the same closed workload through the gateway and straight to the backend.
Printed: TTFT p50/p99 both ways; per ``Server-Timing`` entry of the gateway's answers (``gw``:
the gateway's own part of the TTFT; ``route``: the decision; ``upstream_ttfb``: the backend's
first byte as the gateway saw it) its p50, p99 and max; and the slowest requests with every
entry and when each was sent. A slow request whose ``gw`` is small waited on the backend; a
cluster of them sent within a few ms of each other, with the backend slow as well, is the
machine stalling everything at once, not the gateway. Not part of the test suite.
"""

from __future__ import annotations

import argparse
from typing import Any

from gateway.timing import parse
from loadtests.bench.lean_client import run_lean
from loadtests.bench.overhead_setup import MODEL, one_backend_config, overhead_workload
from loadtests.bench.records import RequestRecord
from loadtests.bench.stats import percentile
from loadtests.bench.workload import parse_workload
from loadtests.processes import gateway, mock_backend
from loadtests.results_file import fmt, write_results


def entry_durations(record: RequestRecord) -> dict[str, float]:
    """The ``dur`` of every entry of ``record``'s ``Server-Timing`` header, by name."""
    header = record.server_timing or ""
    return {e.name: e.dur_ms for e in parse(header) if e.dur_ms is not None}


def ttfts_ms(records: list[RequestRecord]) -> list[float]:
    return [r.ttft_s * 1000.0 for r in records if r.ttft_s is not None and r.error is None]


async def measure(concurrency: int, requests: int) -> tuple[list[RequestRecord], list[float]]:
    """The gateway's records and the direct TTFTs (ms) of the same workload."""
    async with mock_backend(MODEL) as (backend_url, _):
        async with gateway(one_backend_config("b1", backend_url)) as (url, _):
            warm = parse_workload(overhead_workload(concurrency, max(concurrency * 4, 100)))
            await run_lean(url, warm)
            workload = parse_workload(overhead_workload(concurrency, requests))
            through = await run_lean(url, workload)
            direct = await run_lean(backend_url, workload)
    return list(through.records), ttfts_ms(list(direct.records))


def report(records: list[RequestRecord], direct_ms: list[float], slowest: int) -> dict[str, Any]:
    answered = [r for r in records if r.ttft_s is not None and r.error is None]
    gateway_ms = ttfts_ms(answered)
    by_entry: dict[str, list[float]] = {}
    for record in answered:
        for name, dur in entry_durations(record).items():
            by_entry.setdefault(name, []).append(dur)
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
        "slowest": [
            {"ttft_ms": (r.ttft_s or 0.0) * 1000.0, "sent_s": r.sent_s,
             "entries_ms": entry_durations(r)}
            for r in tail
        ],
    }  # fmt: skip


def print_report(summary: dict[str, Any]) -> None:
    ttft = summary["ttft_ms"]
    print(f"requests {summary['requests']}, errors {summary['errors']}")
    for side in ("direct", "gateway"):
        print(f"TTFT {side:<8} p50 {fmt(ttft[side]['p50']):>8}  p99 {fmt(ttft[side]['p99']):>8}")
    print(f"\n{'entry':<22}{'p50':>10}{'p99':>10}{'max':>10}   (ms)")
    for name, cut in summary["entries_ms"].items():
        print(f"{name:<22}{fmt(cut['p50'], 3):>10}{fmt(cut['p99'], 3):>10}{fmt(cut['max'], 3):>10}")
    print("\nslowest first tokens (ms; sent: seconds into the run)")
    for row in summary["slowest"]:
        parts = ", ".join(f"{name} {dur:.2f}" for name, dur in row["entries_ms"].items())
        print(f"ttft {row['ttft_ms']:7.2f}  sent {row['sent_s']:7.3f}  {parts}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.timing_tail", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--slowest", type=int, default=10, help="requests listed one by one")
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    import uvloop

    records, direct_ms = uvloop.run(measure(args.concurrency, args.requests))
    summary = report(records, direct_ms, args.slowest)
    print_report(summary)
    meta = {"concurrency": args.concurrency, "requests": args.requests, "backend": "mock"}
    write_results(args.out, "timing-tail", {"meta": meta, **summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
