"""The emulator's own limit: how late its events leave against its engine model, by load.

    .venv/bin/python -m loadtests.emulator.self_accuracy [--levels 1,100,300,1000] [--itl-ms 40]

``loadtests.bench.accuracy`` measures the *load generator* against the emulator (and against
an exact pacer); its emulator rows mix the generator's error with the emulator's. This one
isolates the emulator: the same fixed-timing ``meridian emulate`` process and closed-loop
``meridian bench`` load per level, but the verdict comes from the emulator's own
``meridian_emulator_emit_lag_*`` metrics (each event's release time minus the time the engine
model gave it, measured inside the emulator), so the generator's error does not count. A
level is accurate when the mean lag is within ``--tolerance-pct`` of the ITL (typical) and
when 99% of requests never had an event later than that (tail). Writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import orjson

from loadtests.bench.accuracy import Settings
from loadtests.bench.cli import run_fast
from loadtests.bench.reference_servers import MODEL, server_process
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload

LAG_MAX = "meridian_emulator_emit_lag_max_seconds"


@dataclass(frozen=True, slots=True)
class LagLevel:
    concurrency: int
    requests: int
    events: int
    mean_lag_ms: float
    worst_lag_p99_ms: float  # upper bucket bound under which 99% of requests' worst lag fell
    tokens_per_s: float
    typical_ok: bool
    tail_ok: bool


def _workload(concurrency: int, settings: Settings) -> dict[str, object]:
    """Closed loop, users ramped in, lengths spread +-25% (as ``loadtests.bench.accuracy``)."""
    out = settings.output_tokens
    return {
        "name": f"emulator-lag-c{concurrency}",
        "seed": 1,
        "model": MODEL,
        "arrival": {
            "mode": "closed",
            "concurrency": concurrency,
            "ramp_up_s": concurrency / settings.ramp_per_s,
        },
        "limits": {"requests": max(settings.rounds * concurrency, settings.min_requests)},
        "request_timeout_s": 600,
        "mix": [
            {
                "kind": "chat",
                "user_tokens": settings.prompt_tokens,
                "max_tokens": [out * 3 // 4, out * 5 // 4],
            }
        ],
    }


def _samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("meridian_emulator_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _p99_bound(samples: dict[str, float]) -> float:
    count = samples.get(f"{LAG_MAX}_count", 0.0)
    buckets = sorted(
        (float(name.split('le="', 1)[1].rstrip('"}')), value)
        for name, value in samples.items()
        if name.startswith(f"{LAG_MAX}_bucket") and "+Inf" not in name
    )
    for bound, cumulative in buckets:
        if count and cumulative >= 0.99 * count:
            return bound
    return float("inf")


async def measure(concurrency: int, settings: Settings) -> LagLevel:
    workload = parse_workload(_workload(concurrency, settings))
    async with server_process("emulator", settings.itl_ms, settings.ttft_ms) as (url, _):
        result = await run_bench(url, workload, BenchOptions(max_connections=concurrency))
        async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as response:
            samples = _samples(await response.text())
    events = int(samples.get("meridian_emulator_emitted_events_total", 0.0))
    mean_ms = samples.get("meridian_emulator_emit_lag_seconds_total", 0.0) / max(events, 1) * 1e3
    p99_ms = _p99_bound(samples) * 1e3
    limit_ms = settings.itl_ms * settings.tolerance_pct / 100.0
    tokens = sum(r.completion_tokens or 0 for r in result.records)
    wall = max(result.duration_s, 1e-9)
    return LagLevel(
        concurrency, len(result.records), events, mean_ms, p99_ms, tokens / wall,
        typical_ok=mean_ms <= limit_ms, tail_ok=p99_ms <= limit_ms,
    )  # fmt: skip


async def _levels(levels: list[int], settings: Settings) -> list[LagLevel]:
    out = []
    for concurrency in levels:
        print(f"measuring the emulator at {concurrency} streams", file=sys.stderr, flush=True)
        out.append(await measure(concurrency, settings))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.emulator.self_accuracy")
    parser.add_argument("--levels", default="1,100,300,1000")
    parser.add_argument("--itl-ms", type=float, default=40.0)
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tolerance-pct", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("out/emulator_self_accuracy"))
    args = parser.parse_args(argv)
    settings = Settings(
        itl_ms=args.itl_ms, ttft_ms=args.ttft_ms, output_tokens=args.output_tokens,
        prompt_tokens=64, rounds=args.rounds, min_requests=10,
        tolerance_pct=args.tolerance_pct, ramp_per_s=500.0,
    )  # fmt: skip
    levels = run_fast(_levels([int(v) for v in args.levels.split(",")], settings))
    limit = settings.itl_ms * settings.tolerance_pct / 100.0
    print(f"emulator emit lag vs its model (ITL {settings.itl_ms:g} ms; limit {limit:g} ms)")
    print(f"{'conc':>5}{'reqs':>7}{'events':>9}{'tok/s':>8}{'mean ms':>9}{'p99 worst':>10} ok")
    for r in levels:
        verdict = ("typical " if r.typical_ok else "") + ("tail" if r.tail_ok else "")
        print(
            f"{r.concurrency:>5}{r.requests:>7}{r.events:>9}{r.tokens_per_s:>8.0f}"
            f"{r.mean_lag_ms:>9.2f}{r.worst_lag_p99_ms:>10.1f} {verdict or 'NO'}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "self_accuracy.json"
    doc = {"settings": asdict(settings), "levels": [asdict(r) for r in levels]}
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
