"""Calibration on a real emulated fleet (issue 14): predicted vs actual TTFT per request, with
routing's step clock on and off in the same run.

    python -m loadtests.bench_fleet_calibration [--rate 8] [--duration 30] [--rounds 2]
        [--warmup-s 5] [--out DIR]

One ``meridian emulate loadtests/fleets/calibration.yaml`` process (three backends whose
decode step is a large share of a short TTFT) and two ``meridian serve`` gateways in front of
it: ``clock`` (predicted_ttft as shipped: the relay feeds the step clock, the candidates a
decision returns wait for the engine's next step) and ``half-step`` (``routing.params.step_phase:
false``: always half a step; the clock still listens). Each round runs the same open-loop chat
workload (unique prompts, so no prefix-cache effect) through one gateway, then the other (the
order alternates by round), every backend reset (``/admin/reset``) before each. Per request,
from its ``Server-Timing``: ``predicted_ttft`` and ``predicted_ttft_p90`` (routing's, for the
backend that served it) against ``upstream_ttfb`` (what happened, from the gateway: what routing
predicts). Requests scheduled in a round's first ``--warmup-s`` are left out (the learner
settling). Reported per side: requests, median |predicted - actual| / actual, the share of
actual TTFTs at or below the predicted p90 (issue 14's goals: <= 10%, >= 90%), actual TTFT p50
and p99, and each side's error over the other's. Wall-clock TTFTs depend on the machine: the
load average is printed, and the comparison is within the run. Table on stdout, JSON in
``loadtests/results/``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from loadtests.bench.records import RequestRecord
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import Workload, parse_workload
from loadtests.bench_fleet import emulated_fleet as fleet_processes
from loadtests.emulator.fleet import FleetError, load_fleet
from loadtests.processes import gateway
from loadtests.results_file import write_results

FLEET = Path(__file__).resolve().parent / "fleets" / "calibration.yaml"
REGION = "local"
MODEL = "m"
SIDES = {"clock": {}, "half-step": {"step_phase": False}}


@contextlib.asynccontextmanager
async def emulated_fleet() -> AsyncIterator[dict[str, str]]:
    """The fleet's backends as ``{name: base url}`` while its process runs."""
    async with fleet_processes(FLEET, REGION) as backends:
        yield {backend["name"]: backend["url"] for backend in backends}


def gateway_config(urls: dict[str, str], params: dict[str, Any]) -> dict[str, Any]:
    """What an operator writes for this fleet: each backend's nominal speeds from its spec."""
    fleet = load_fleet(FLEET)
    if isinstance(fleet, FleetError):
        raise RuntimeError(fleet.message)
    backends = []
    for spec in fleet.backend_configs(from_region=REGION):
        engine = spec.engine
        backends.append(
            {
                "name": spec.name,
                "region": spec.region,
                "url": urls[spec.name] + "/v1",
                "engine": "vllm",
                "models": list(spec.models),
                "capacity": {
                    "max_num_seqs": engine.max_num_seqs,
                    "prefill_tokens_per_s": engine.prefill_tokens_per_s,
                    "itl_ms": engine.decode_base_ms
                    + engine.decode_per_seq_ms * engine.max_num_seqs / 2,
                    "max_num_batched_tokens": engine.max_num_batched_tokens,
                    "first_token_overhead_ms": engine.first_token_overhead_ms,
                },
            }
        )
    return {
        "region": REGION,
        "regions": [{"name": REGION, "rtt_ms": fleet.rtt(REGION, REGION)}],
        "backends": backends,
        "routing": {"policy": "predicted_ttft", "params": params},
        "signals": {"probes": {"interval_s": 1.0}, "engine_metrics": {"interval_s": 0.5}},
    }


def workload(rate: float, duration_s: float, seed: int) -> Workload:
    return parse_workload(
        {
            "name": "fleet-calibration",
            "seed": seed,
            "model": MODEL,
            "arrival": {"mode": "open", "rate": rate},
            "limits": {"duration_s": duration_s},
            "request_timeout_s": 60,
            "mix": [{"kind": "chat", "user_tokens": [100, 400], "max_tokens": [32, 128]}],
            "populations": [{"origin": REGION}],
        }
    )


def timing(record: RequestRecord) -> dict[str, float]:
    """``Server-Timing`` name -> dur (ms) of one response."""
    entries: dict[str, float] = {}
    for part in (record.server_timing or "").split(","):
        name, *params = (p.strip() for p in part.split(";"))
        for param in params:
            if param.startswith("dur="):
                entries[name] = float(param[4:])
    return entries


def samples(records: list[RequestRecord], warmup_s: float) -> list[tuple[float, float, float]]:
    """(predicted, predicted p90, actual) TTFT of every served request after the warm-up."""
    out = []
    for record in records:
        if not record.ok or record.scheduled_s < warmup_s:
            continue
        t = timing(record)
        if {"predicted_ttft", "predicted_ttft_p90", "upstream_ttfb"} <= t.keys():
            out.append((t["predicted_ttft"], t["predicted_ttft_p90"], t["upstream_ttfb"]))
    return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(rows: list[tuple[float, float, float]]) -> dict[str, float | int | None]:
    if not rows:
        return {"requests": 0, "median_rel_error": None, "below_p90": None}
    errors = [abs(p - a) / a for p, _, a in rows if a > 0]
    actual = [a for _, _, a in rows]
    return {
        "requests": len(rows),
        "median_rel_error": statistics.median(errors),
        "below_p90": sum(a <= p90 for _, p90, a in rows) / len(rows),
        "median_abs_error_ms": statistics.median(abs(p - a) for p, _, a in rows),
        "ttft_p50_ms": _quantile(actual, 0.5),
        "ttft_p99_ms": _quantile(actual, 0.99),
    }


async def _reset(session: aiohttp.ClientSession, urls: dict[str, str]) -> None:
    for url in urls.values():
        async with session.post(f"{url}/admin/reset", json={}) as resp:
            resp.raise_for_status()


async def measure(args: argparse.Namespace) -> dict[str, list[tuple[float, float, float]]]:
    rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in SIDES}
    async with emulated_fleet() as urls, contextlib.AsyncExitStack() as stack:
        gateways = {
            name: (await stack.enter_async_context(gateway(gateway_config(urls, params))))[0]
            for name, params in SIDES.items()
        }
        session = await stack.enter_async_context(aiohttp.ClientSession())
        options = BenchOptions(progress=False)
        for round_ in range(args.rounds):
            order = list(SIDES) if round_ % 2 == 0 else list(SIDES)[::-1]
            for name in order:
                await _reset(session, urls)
                load = workload(args.rate, args.duration, seed=round_ + 1)
                result = await run_bench(gateways[name], load, options)
                got = samples(list(result.records), args.warmup_s)
                rows[name] += got
                print(f"round {round_ + 1} {name}: {len(got)} requests", file=sys.stderr)
    return rows


def _pct(value: Any) -> str:
    return "    -" if value is None else f"{100 * value:5.1f}"


def format_table(results: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'side':10s} {'reqs':>5s} |err|%  <p90%  |err| ms  TTFT p50   p99  err/other"]
    names = list(results)
    for name in names:
        r = results[name]
        other = results[names[1 - names.index(name)]]["median_rel_error"]
        ratio = f"{r['median_rel_error'] / other:8.2f}x" if other and r["median_rel_error"] else "-"
        lines.append(
            f"{name:10s} {r['requests']:5d} {_pct(r['median_rel_error'])}  "
            f"{_pct(r['below_p90'])}  {r.get('median_abs_error_ms', 0.0):7.1f}  "
            f"{r.get('ttft_p50_ms', 0.0):8.1f} {r.get('ttft_p99_ms', 0.0):5.0f}  {ratio}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=8.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per side a round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("loadtests/results"))
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    import uvloop

    rows = uvloop.run(measure(args))
    results = {name: summary(side) for name, side in rows.items()}
    load_after = os.getloadavg()
    print(format_table(results))
    print(f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    payload = {
        "benchmark": "fleet_calibration",
        "fleet": FLEET.name,
        "args": {k: str(v) for k, v in vars(args).items()},
        "load_average": [load_before[0], load_after[0]],
        "sides": results,
    }
    write_results(args.out, "fleet-calibration", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
