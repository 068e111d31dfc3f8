"""How much does the load generator itself add? Measure it against servers of known timing.

    .venv/bin/python -m loadtests.bench.accuracy [--levels 1,100,300,1000] [--itl-ms 40]
        [--ttft-ms 100] [--output-tokens 64] [--servers pacer,emulator] [--out DIR]

For each server and concurrency level a fresh server process (separate, as in real use) streams
``--output-tokens`` (+-25%) tokens per request, closed loop, users ramped in:

- ``pacer`` (``loadtests.bench.pacer``): first token exactly ``--ttft-ms`` after the request,
  then exactly one every ``--itl-ms``, each on its own timer, a few microseconds of CPU per
  token. What the generator reports beyond that is the generator's (and the machine's) error.
- ``emulator`` (``meridian emulate``): decode steps of exactly ``--itl-ms`` whatever the batch
  (``decode_per_seq_ms=0``), negligible prefill, never queueing; TTFT is ``--ttft-ms`` of
  overhead plus the wait for the engine's next step boundary, so its reference is the
  emulator's own mean TTFT (exact: histogram sum / count from ``/metrics``). Here the error
  also holds the emulator's own write lag, which grows with the streams it serves.

Both processes' CPU and the rest of the machine's are shown, so a saturated side can be told
(the machine has 2 cores, shared). Two verdicts per level against ``--tolerance-pct``:
*typical* (no failed request; TTFT mean and ITL p50 within tolerance) and *tail* (ITL p99 within
tolerance: 2 ms of jitter on a 40 ms gap). For each, the report names the highest level reached
before the first level that misses it.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from loadtests.bench.cli import run_fast
from loadtests.bench.reference_servers import MODEL, SERVER_KINDS, reference_means, server_process
from loadtests.bench.report import summarize
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Settings:
    itl_ms: float
    ttft_ms: float  # the pacer's TTFT; the emulator's first-token overhead
    output_tokens: int
    prompt_tokens: int
    rounds: int  # requests per level = rounds x concurrency (at least min_requests)
    min_requests: int
    tolerance_pct: float
    ramp_per_s: float  # users started per second (connections opened at that pace)


@dataclass(frozen=True)
class LevelResult:
    server: str
    concurrency: int
    requests: int
    errors: int
    duration_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    ttft_mean_ms: float | None
    server_ttft_mean_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    itl_mean_ms: float | None
    server_itl_mean_ms: float | None
    ttft_mean_err_pct: float | None
    itl_p50_err_pct: float | None
    itl_p99_err_pct: float | None
    loop_lag_p99_ms: float | None  # the generator's own event-loop lag
    bench_cpu_pct: float
    server_cpu_pct: float
    other_cpu_pct: float  # everything else on the machine meanwhile (other work competes)
    typical_ok: bool  # no errors; TTFT mean and ITL p50 within tolerance
    tail_ok: bool  # ITL p99 within tolerance


def _err_pct(measured: float | None, reference: float | None) -> float | None:
    if measured is None or reference is None or reference == 0:
        return None
    return (measured - reference) / reference * 100.0


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def machine_busy_s() -> float:
    """CPU seconds spent by every process on the machine (all cores) since boot."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / CLOCK_TICKS


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _workload(concurrency: int, settings: Settings) -> dict[str, object]:
    requests = max(settings.rounds * concurrency, settings.min_requests)
    return {
        "name": f"accuracy-c{concurrency}",
        "seed": 1,
        "model": MODEL,
        "arrival": {
            "mode": "closed",
            "concurrency": concurrency,
            "ramp_up_s": concurrency / settings.ramp_per_s,
        },
        "limits": {"requests": requests},
        "request_timeout_s": 600,
        "mix": [
            {
                "kind": "chat",
                "user_tokens": settings.prompt_tokens,
                # Lengths spread +-25% so streams do not finish in the same engine step and
                # come back as one burst (a lock-step artefact of equal lengths, not of load).
                "max_tokens": [settings.output_tokens * 3 // 4, settings.output_tokens * 5 // 4],
            }
        ],
    }


async def measure_level(kind: str, concurrency: int, settings: Settings) -> LevelResult:
    workload = parse_workload(_workload(concurrency, settings))
    async with server_process(kind, settings.itl_ms, settings.ttft_ms) as (url, pid):
        before = (own_cpu_s(), process_cpu_s(pid), machine_busy_s(), time.perf_counter())
        result = await run_bench(url, workload, BenchOptions(max_connections=concurrency))
        after = (own_cpu_s(), process_cpu_s(pid), machine_busy_s(), time.perf_counter())
        bench_cpu, emu_cpu, busy, wall = (b - a for a, b in zip(before, after, strict=True))
        server_ttft, server_itl = await reference_means(
            kind, url, settings.itl_ms, settings.ttft_ms
        )
    report = summarize(result)
    ttft_err = _err_pct(report.ttft_ms.mean, server_ttft)
    p50_err = _err_pct(report.itl_ms.p50, settings.itl_ms)
    p99_err = _err_pct(report.itl_ms.p99, settings.itl_ms)
    tolerance = settings.tolerance_pct
    typical = [ttft_err, p50_err]
    typical_ok = report.ok == report.requests and all(
        e is not None and abs(e) <= tolerance for e in typical
    )
    return LevelResult(
        server=kind,
        concurrency=concurrency,
        requests=report.requests,
        errors=report.requests - report.ok,
        duration_s=report.duration_s,
        ttft_p50_ms=report.ttft_ms.p50,
        ttft_p99_ms=report.ttft_ms.p99,
        ttft_mean_ms=report.ttft_ms.mean,
        server_ttft_mean_ms=server_ttft,
        itl_p50_ms=report.itl_ms.p50,
        itl_p99_ms=report.itl_ms.p99,
        itl_mean_ms=report.itl_ms.mean,
        server_itl_mean_ms=server_itl,
        ttft_mean_err_pct=ttft_err,
        itl_p50_err_pct=p50_err,
        itl_p99_err_pct=p99_err,
        loop_lag_p99_ms=report.loop_lag_ms.p99,
        bench_cpu_pct=bench_cpu / wall * 100.0,
        server_cpu_pct=emu_cpu / wall * 100.0,
        other_cpu_pct=max(0.0, busy - bench_cpu - emu_cpu) / wall * 100.0,
        typical_ok=typical_ok,
        tail_ok=p99_err is not None and abs(p99_err) <= tolerance,
    )


def _cell(value: float | None, width: int, digits: int = 1, sign: bool = False) -> str:
    if value is None:
        return f"{'-':>{width}}"
    return f"{value:>+{width}.{digits}f}" if sign else f"{value:>{width}.{digits}f}"


def _verdict(ok: bool) -> str:
    return "yes" if ok else "NO"


def format_table(levels: list[LevelResult], settings: Settings) -> str:
    head = (
        f"{'server':<9}{'conc':>5}{'reqs':>6}{'err':>4} | "
        f"{'TTFT p50':>9}{'p99':>8}{'mean':>8}{'ref mean':>9}"
        f"{'err%':>7} | {'ITL p50':>8}{'p99':>8}{'err50%':>8}{'err99%':>8}{'ref mean':>9} |"
        f"{'loop lag':>9}{'cpu bench':>10}{'srv':>5}{'other':>6} typical tail"
    )
    lines = [
        f"configured: ITL {settings.itl_ms:g} ms (every gap); TTFT {settings.ttft_ms:g} ms (pacer), "
        f"{settings.ttft_ms:g} ms + 0..2 engine steps (emulator); {settings.output_tokens} output "
        f"tokens +-25%; tolerance {settings.tolerance_pct:g}%.",
        "Times in ms; loop lag = p99 lateness of the generator's 10 ms timer; CPU in % of one "
        "core (2 cores: 200%), 'other' = the rest of the machine meanwhile.",
        head,
    ]
    for r in levels:
        lines.append(
            f"{r.server:<9}{r.concurrency:>5}{r.requests:>6}{r.errors:>4} | "
            f"{_cell(r.ttft_p50_ms, 9)}"
            f"{_cell(r.ttft_p99_ms, 8)}{_cell(r.ttft_mean_ms, 8)}{_cell(r.server_ttft_mean_ms, 9)}"
            f"{_cell(r.ttft_mean_err_pct, 7, sign=True)} | {_cell(r.itl_p50_ms, 8, 2)}"
            f"{_cell(r.itl_p99_ms, 8, 2)}{_cell(r.itl_p50_err_pct, 8, sign=True)}"
            f"{_cell(r.itl_p99_err_pct, 8, sign=True)}{_cell(r.server_itl_mean_ms, 9, 2)} |"
            f"{_cell(r.loop_lag_p99_ms, 9)}{r.bench_cpu_pct:>10.0f}{r.server_cpu_pct:>5.0f}"
            f"{r.other_cpu_pct:>6.0f}{_verdict(r.typical_ok):>8}{_verdict(r.tail_ok):>5}"
        )
    return "\n".join(lines)


def accurate_limit(levels: list[LevelResult], verdict: str) -> int | None:
    """The highest level reached before the first that misses ``verdict`` ("typical_ok" or
    "tail_ok"); None when even the first level misses it."""
    limit = None
    for level in levels:
        if not getattr(level, verdict):
            break
        limit = level.concurrency
    return limit


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.accuracy", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--levels", default="1,100,300,1000", help="concurrency levels")
    parser.add_argument("--itl-ms", type=float, default=40.0)
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--servers", default=",".join(SERVER_KINDS), help="pacer,emulator")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="requests per stream per level")
    parser.add_argument("--min-requests", type=int, default=10)
    parser.add_argument("--tolerance-pct", type=float, default=5.0)
    parser.add_argument("--ramp-per-s", type=float, default=500.0, help="users started per s")
    parser.add_argument("--out", type=Path, default=Path("out/bench_accuracy"))
    return parser


async def _run_levels(
    servers: list[str], levels: list[int], settings: Settings
) -> list[LevelResult]:
    results = []
    for kind in servers:
        for concurrency in levels:
            print(f"measuring {kind} at {concurrency} streams", file=sys.stderr, flush=True)
            results.append(await measure_level(kind, concurrency, settings))
    return results


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = Settings(
        itl_ms=args.itl_ms,
        ttft_ms=args.ttft_ms,
        output_tokens=args.output_tokens,
        prompt_tokens=args.prompt_tokens,
        rounds=args.rounds,
        min_requests=args.min_requests,
        tolerance_pct=args.tolerance_pct,
        ramp_per_s=args.ramp_per_s,
    )
    servers = [kind for kind in args.servers.split(",") if kind]
    unknown = set(servers) - set(SERVER_KINDS)
    if unknown:
        print(f"unknown --servers {sorted(unknown)}; choose from {SERVER_KINDS}", file=sys.stderr)
        return 2
    levels = [int(level) for level in args.levels.split(",")]
    results = run_fast(_run_levels(servers, levels, settings))
    print(format_table(results, settings))
    limits: dict[str, dict[str, int | None]] = {}
    for kind in servers:
        mine = [r for r in results if r.server == kind]
        limits[kind] = {v: accurate_limit(mine, v) for v in ("typical_ok", "tail_ok")}
        print(
            f"{kind}: within {settings.tolerance_pct:g}% up to concurrency: typical (TTFT mean, "
            f"ITL p50) {limits[kind]['typical_ok']}; tail (ITL p99) {limits[kind]['tail_ok']}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    document = {
        "settings": asdict(settings),
        "levels": [asdict(r) for r in results],
        "accurate_up_to": limits,
    }
    path = args.out / "accuracy.json"
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
