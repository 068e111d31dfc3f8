"""Where the slowest first tokens' time went, by the gateway's own ``Server-Timing`` entries.

    python -m loadtests.timing_tail [--concurrency 32] [--requests 2000] [--slowest 10]
        [--src NAME=DIR ... --rounds 3] [--out loadtests/results]

The overhead benchmarks give the added TTFT as one difference of two distributions; this
splits it. Three processes, as in ``bench_overhead --backend mock --client lean``: the mock
backend (TTFT 20 ms, 5 ms a token), one ``meridian serve`` worker and this load generator. A
warm-up, then the same closed workload through the gateway and straight to the backend.
Printed: TTFT p50/p99 both ways; per ``Server-Timing`` entry of the gateway's answers (``gw``:
the gateway's own part of the TTFT; ``route``: the decision; ``upstream_ttfb``: the backend's
first byte as the gateway saw it) its p50, p99 and max; and the slowest requests with every
entry and when each was sent. A slow request whose ``gw`` is small waited on the backend; a
cluster of them sent within a few ms of each other, with the backend slow as well, is the
machine stalling everything at once, not the gateway.

``outside`` is the client's TTFT less the gateway's ``ttft`` entry (its head read -> its first
byte written): the time the request spent where the gateway's clock does not run. That is the
head waiting to be read — the loop busy with other requests, or the process waiting for a
core — and the first byte's way back to the client (~0.6 ms p50 here, on loopback, including
the client's own parse). At c=32 with a fixed answer length the users' requests come in waves
(every user's stream ends at about the same time), and a wave's last heads wait for the loop
to serve the ones before them: ``outside`` is then most of the added TTFT's tail
(docs/results/perf-issue16.md, "Session 25").

``--src NAME=DIR`` measures another checkout's gateway (its ``PYTHONPATH``) as well: each of
``--rounds`` rounds runs every side once, in turn, each with its own backend and gateway
processes, and each side's figures pool its rounds. Not part of the test suite.
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
from loadtests.probed_gateway import checkouts
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


async def measure(
    concurrency: int, requests: int, env: dict[str, str] | None = None
) -> tuple[list[RequestRecord], list[float]]:
    """The gateway's records and the direct TTFTs (ms) of the same workload (``env``: the
    gateway's environment, e.g. another checkout's ``PYTHONPATH``)."""
    async with mock_backend(MODEL) as (backend_url, _):
        async with gateway(one_backend_config("b1", backend_url), env=env) as (url, _):
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
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    import uvloop

    sides = checkouts(args.src)
    pooled: dict[str, tuple[list[RequestRecord], list[float]]] = {n: ([], []) for n, _ in sides}
    for _ in range(args.rounds):
        for name, env in sides:
            records, direct_ms = uvloop.run(measure(args.concurrency, args.requests, env))
            pooled[name][0].extend(records)
            pooled[name][1].extend(direct_ms)
    summaries = {name: report(*pooled[name], args.slowest) for name, _ in sides}
    for name, summary in summaries.items():
        print_report(summary, name if len(sides) > 1 else "")
        print()
    meta = {"concurrency": args.concurrency, "requests": args.requests, "backend": "mock",
            "rounds": args.rounds, "src": args.src}  # fmt: skip
    write_results(args.out, "timing-tail", {"meta": meta, **summaries["this checkout"],
                                             "sides": summaries})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
