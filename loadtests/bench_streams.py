"""Many concurrent streams through one gateway process: memory per open stream, and errors.

    python -m loadtests.bench_streams [--streams 5000] [--tokens 8] [--token-ms 2000] [--waves 3]
                                      [--tls] [--probe-interval-s S] [--workers N]

An emulated backend decodes slowly (one token every ``--token-ms``) so that ``--streams``
streams are open at once; the load generator opens them all together (closed loop, concurrency
= streams, one request each) through ``meridian serve --workers 1``. The gateway's RSS is read
from /proc while idle (after a warm-up), every 0.25 s during the run (the peak, with every
stream open), and after the streams ended. ``--waves N`` sends the same burst N times through
the same gateway process, one after another: flat memory means the RSS after each wave stays
where the first left it (CPython keeps its arenas, so "after" need not fall back to "idle";
it must not climb wave over wave). Reported per wave: errors, RSS peak / after, and
(peak - idle) / streams; and the growth of "after" from the first wave to the last.
Also reported: the gateway's probe and scrape errors by kind over the run (``lagged``: a
deadline that passed while the gateway's own loop was too busy to look, gateway/lag_timeout.py;
no verdict on the backend), and the probes' pooled round trips (routing's RTT) over the run:
how many, and how many read over 25 ms. The backend is on loopback (~1 ms).
gateway/signals/probe_measure.py leaves out an answer's wait to be read, but not a late send or
a slow backend. ``--probe-interval-s S``: probe the backend every S seconds (more samples).
``--tls``: the backend serves HTTPS (a throwaway CA, ``loadtests/tls_certs.py``), so every
stream's upstream connection is a TLS handshake too, as with a provider's endpoint.
``--workers N``: N gateway workers, which share their state through the host's coordinator;
reported: how often a worker lost it (``meridian_state_degraded_spells_total``: a call to the
coordinator failed). The RSS figures are then the supervisor's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from loadtests.bench.report import summarize
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload
from loadtests.processes import ADMIN_URLS, emulated_backend, gateway
from loadtests.results_file import write_results
from loadtests.tls_certs import LocalCertificates, local_certificates

MODEL = "streams-model"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def _workload(streams: int, tokens: int) -> dict[str, object]:
    return {
        "name": f"streams-{streams}",
        "seed": 5,
        "model": MODEL,
        "arrival": {"mode": "closed", "concurrency": streams},
        "limits": {"requests": streams},
        "request_timeout_s": 600,
        "mix": [{"kind": "chat", "user_tokens": 32, "max_tokens": tokens}],
    }


async def _peak(pid: int, done: asyncio.Event) -> float:
    peak = 0.0
    while not done.is_set():
        peak = max(peak, rss_mb(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 0.25)
    return max(peak, rss_mb(pid))


async def _wave(url: str, pid: int, streams: int, tokens: int, idle: float) -> dict[str, Any]:
    done = asyncio.Event()
    peak_task = asyncio.ensure_future(_peak(pid, done))
    workload = parse_workload(_workload(streams, tokens))
    result = await run_bench(url, workload, BenchOptions(max_connections=streams))
    done.set()
    peak = await peak_task
    await asyncio.sleep(2.0)  # let the loop settle before reading what is kept
    after = rss_mb(pid)
    report = summarize(result)
    return {
        "ok": report.ok,
        "errors": report.requests - report.ok,
        "error_kinds": dict(report.errors),
        "rss_peak_mb": peak,
        "rss_after_mb": after,
        "kb_per_stream": (peak - idle) * 1024.0 / streams,
        "ttft_p50_ms": report.ttft_ms.p50,
        "ttft_p99_ms": report.ttft_ms.p99,
    }


async def measure(
    streams: int,
    tokens: int,
    token_ms: float,
    waves: int = 1,
    tls: bool = False,
    probe_interval_s: float | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    engine = {
        "max_num_seqs": streams * 2,
        "max_num_batched_tokens": 10_000_000,
        "prefill_tokens_per_s": 1e12,
        "decode_base_ms": token_ms,
        "decode_per_seq_ms": 0,
        "first_token_overhead_ms": 20,
    }
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as where:
        certificates = local_certificates(Path(where)) if tls else None
        return await _measure(
            engine, streams, tokens, waves, certificates, probe_interval_s, workers
        )


async def _measure(
    engine: dict[str, Any],
    streams: int,
    tokens: int,
    waves: int,
    certificates: LocalCertificates | None,
    probe_interval_s: float | None,
    workers: int,
) -> dict[str, Any]:
    serve_tls: list[str] = []
    if certificates is not None:
        serve_tls = ["--tls-cert", str(certificates.cert_file)]
        serve_tls += ["--tls-key", str(certificates.key_file)]
    async with emulated_backend("b1", MODEL, engine, extra=serve_tls) as (backend_url, _):
        backend: dict[str, object] = {"name": "b1", "region": "local", "url": backend_url + "/v1"}
        if certificates is not None:
            backend["tls"] = {"ca_file": str(certificates.ca_file)}
        # The gateway is told the engine's real batch size, or its capacity filter (4x the
        # batch queued) would refuse streams past ~1,280 with a 503, as it should.
        backend["capacity"] = {"max_num_seqs": streams * 2}
        config = {
            "backends": [{**backend, "models": [MODEL], "max_connections": streams * 2}],
            # The load generator is every client at one address; the door's per-client cap
            # (256 by default, against one client hogging the door) is for distinct clients.
            "door": {"max_connections_per_client": streams * 2},
        }
        if probe_interval_s is not None:
            config["signals"] = {"probes": {"interval_s": probe_interval_s}}
        async with gateway(config, workers) as (url, pid):
            warm = parse_workload(_workload(20, tokens))
            await run_bench(url, warm, BenchOptions(max_connections=20))
            idle = rss_mb(pid)
            rounds = [await _wave(url, pid, streams, tokens, idle) for _ in range(waves)]
            page = await _metrics_page(ADMIN_URLS[url])
    first, last = rounds[0], rounds[-1]
    return {
        "streams": streams,
        "workers": workers,
        "tls": certificates is not None,
        "waves": rounds,
        # The first wave's figures at the top level, as before --waves existed.
        **{key: first[key] for key in ("ok", "errors", "error_kinds", "kb_per_stream")},
        "rss_idle_mb": idle,
        "rss_peak_mb": max(w["rss_peak_mb"] for w in rounds),
        "rss_after_mb": last["rss_after_mb"],
        "after_growth_mb": last["rss_after_mb"] - first["rss_after_mb"],
        "ttft_p99_ms": first["ttft_p99_ms"],
        "signal_errors": _signal_errors(page),
        "state_degraded_spells": _state_spells(page),
        "probe_rtts": _probe_rtts(page),
    }


async def _metrics_page(admin_url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{admin_url}/metrics") as response:
        return await response.text()


def _probe_rtts(page: str, over_s: float = 0.025) -> dict[str, float]:
    """The probes' pooled round-trip samples (routing's RTT) in the gateway's /metrics: how
    many, and how many over ``over_s`` (a bucket bound of ``meridian_probe_rtt_seconds``)."""
    total = within = 0.0
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.labels.get("connection") != "pooled":
                continue
            if sample.name == "meridian_probe_rtt_seconds_count":
                total += sample.value
            elif sample.name == "meridian_probe_rtt_seconds_bucket" and (
                float(sample.labels["le"]) == over_s
            ):
                within += sample.value
    return {"samples": total, f"over_{over_s * 1000:.0f}_ms": total - within}


def _state_spells(page: str) -> float:
    """Times a worker lost the shared state store over the run (every worker's, summed)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == "meridian_state_degraded_spells_total"
    )


def _signal_errors(page: str) -> dict[str, float]:
    """``probe:KIND`` and ``scrape:KIND`` -> how many, from the gateway's /metrics page."""
    counted: dict[str, float] = {}
    names = {"meridian_probe_errors_total": "probe", "meridian_scrape_errors_total": "scrape"}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name in names:
                key = f"{names[sample.name]}:{sample.labels['kind']}"
                counted[key] = counted.get(key, 0.0) + sample.value
    return counted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_streams", description=__doc__)
    parser.add_argument("--streams", type=int, default=5000)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--token-ms", type=float, default=2000.0)
    parser.add_argument("--waves", type=int, default=1, help="the same burst, N times in a row")
    parser.add_argument("--tls", action="store_true", help="the backend serves HTTPS")
    parser.add_argument(
        "--probe-interval-s", type=float, help="probe the backend this often (the default's)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="gateway worker processes (2: the workers share state through the host store)",
    )
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    import uvloop

    run = measure(
        args.streams,
        args.tokens,
        args.token_ms,
        args.waves,
        args.tls,
        args.probe_interval_s,
        args.workers,
    )
    result = uvloop.run(run)
    over = "HTTPS" if args.tls else "HTTP"
    print(
        f"{result['streams']} streams a wave (backend over {over}), {args.workers} worker(s); "
        f"gateway RSS idle {result['rss_idle_mb']:.1f} MB"
        + (" (the supervisor's)" if args.workers > 1 else "")
    )
    print(
        "| wave | ok | errors | RSS peak MB | RSS after MB | KB per open stream | TTFT p50 / p99 ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, wave in enumerate(result["waves"], 1):
        print(
            f"| {n} | {wave['ok']} | {wave['errors']} | {wave['rss_peak_mb']:.1f} | "
            f"{wave['rss_after_mb']:.1f} | {wave['kb_per_stream']:.1f} | "
            f"{wave['ttft_p50_ms']:.0f} / {wave['ttft_p99_ms']:.0f} |"
        )
    print(f"RSS after the last wave - after the first: {result['after_growth_mb']:+.1f} MB")
    errors = ", ".join(f"{k} {v:.0f}" for k, v in sorted(result["signal_errors"].items()))
    print(f"probe and scrape errors by kind: {errors or 'none'}")
    print(f"shared state lost (state_degraded spells): {result['state_degraded_spells']:.0f}")
    rtts = result["probe_rtts"]
    print(f"pooled probe round trips: {rtts['samples']:.0f}, over 25 ms: {rtts['over_25_ms']:.0f}")
    write_results(args.out, "streams", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
