"""The emulated three-region fleet behind Meridian, at two load levels.

    python -m loadtests.bench_fleet [--rates 4,16] [--duration 40] [--out DIR]

Three processes: ``meridian emulate loadtests/fleets/three-region.yaml --from-region us-east``
(six backends, RTTs from a us-east gateway), ``meridian serve`` in front of them, and the load
generator driving ``loadtests/workloads/chat-shared-prefix.yaml`` open-loop at each rate.
Reported per level: TTFT / ITL / end-to-end p50 and p99, throughput, cached-token share, and
where the requests went (per backend). The first level is the baseline the second is compared to.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson

from gateway.embedded import GATEWAY_REGION, backend_entry, region_entries
from loadtests.bench.report import BenchReport, summarize
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import load_workload, with_overrides
from loadtests.emulator.fleet import FleetError, load_fleet
from loadtests.processes import gateway
from loadtests.results_file import write_results

ROOT = Path(__file__).resolve().parent
FLEET = ROOT / "fleets" / "three-region.yaml"
WORKLOAD = ROOT / "workloads" / "chat-shared-prefix.yaml"


@contextlib.asynccontextmanager
async def emulated_fleet(
    fleet: Path = FLEET, region: str = "us-east"
) -> AsyncIterator[list[dict[str, Any]]]:
    """``meridian emulate``'s backend lines (name, url, ...) while its process runs."""
    argv = [sys.executable, "-m", "gateway.cli", "emulate", str(fleet), "--from-region", region]
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    assert process.stdout is not None
    try:
        backends = []
        while True:
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            if not line:
                raise RuntimeError("meridian emulate exited before it was ready")
            message = orjson.loads(line)
            if message.get("ready"):
                break
            backends.append(message)
        yield backends
    finally:
        process.terminate()
        await process.wait()
        await process.wait()


def gateway_config(backends: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator config for the running fleet: capacity hints from the fleet file, as the
    embedded default builds them, so routing knows which backends scale to zero."""
    fleet = load_fleet(FLEET)
    if isinstance(fleet, FleetError):
        raise RuntimeError(fleet.message)
    urls = {b["name"]: b["url"] for b in backends}
    return {
        "region": GATEWAY_REGION,
        "regions": region_entries(fleet),
        "backends": [
            backend_entry(spec, urls[spec.name])
            for spec in fleet.backend_configs(from_region=GATEWAY_REGION)
        ],
    }


async def measure(rates: list[float], duration_s: float) -> list[BenchReport]:
    reports = []
    async with emulated_fleet() as backends, gateway(gateway_config(backends)) as (url, _):
        model = backends[0]["models"][0]
        for rate in rates:
            workload = with_overrides(
                load_workload(WORKLOAD),
                mode="open",
                rate=rate,
                duration_s=duration_s,
                requests=None,
                model=model,
            )
            result = await run_bench(url, workload, BenchOptions())
            reports.append(summarize(result))
    return reports


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def format_table(rates: list[float], reports: list[BenchReport]) -> str:
    lines = [
        f"{'rate':>6} {'reqs':>5} {'err':>4} {'TTFT p50':>9} {'p99':>7} {'ITL p50':>8} {'p99':>6} "
        f"{'E2E p50':>8} {'p99':>7} {'tok/s':>7} {'cached':>7}  where the requests went"
    ]
    for rate, report in zip(rates, reports, strict=True):
        cached = report.cached_tokens / report.prompt_tokens if report.prompt_tokens else 0.0
        where = ", ".join(
            f"{name} {group.requests}" for name, group in sorted(report.by_backend.items())
        )
        lines.append(
            f"{rate:>6g} {report.requests:>5} {report.requests - report.ok:>4} "
            f"{_ms(report.ttft_ms.p50):>9} {_ms(report.ttft_ms.p99):>7} "
            f"{_ms(report.itl_ms.p50):>8} {_ms(report.itl_ms.p99):>6} "
            f"{_ms(report.e2e_ms.p50):>8} {_ms(report.e2e_ms.p99):>7} "
            f"{report.output_tokens_per_s:>7.0f} {cached:>7.0%}  {where}"
        )
    base = reports[0]
    for rate, report in zip(rates[1:], reports[1:], strict=True):
        if base.ttft_ms.p99 and report.ttft_ms.p99:
            lines.append(
                f"rate {rate:g} vs {rates[0]:g}: TTFT p99 x{report.ttft_ms.p99 / base.ttft_ms.p99:.2f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_fleet", description=__doc__)
    parser.add_argument("--rates", default="4,16", help="requests/s, comma separated")
    parser.add_argument("--duration", type=float, default=40.0, help="seconds per level")
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    import uvloop

    reports = uvloop.run(measure(rates, args.duration))
    print(format_table(rates, reports))
    payload = {
        "benchmark": "three_region_fleet",
        "rates": rates,
        "reports": [r.to_dict() for r in reports],
    }
    write_results(args.out, "fleet", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
