"""Soak: does the gateway's memory stay flat under hours of steady streaming load?

    python -m loadtests.bench_soak [--duration-s 1800] [--concurrency 500] [--warmup-s 300]
                                   [--prefix-ttl-s 600] [--max-slope-mb-per-h 2] [--keys 0]
                                   [--out DIR]

Processes: two emulated engines (``meridian emulate``), the gateway (``meridian serve``) and
this closed-loop client, each request a shared system part (one of eight) and a unique user
turn, so the prefix index keeps learning new blocks the whole time, as in production. Every
``--sample-s`` seconds it reads the gateway's RSS and open descriptors from ``/proc`` and its
event-loop lag and task count from ``/metrics``.

Reported: the RSS slope after warm-up (least squares, MB per hour and bytes per request), the
descriptor and task slopes, errors, and TTFT p50/p99 in the first and last window (drift). The
warm-up should cover the prefix TTL: until entries start to expire the index grows by design.
Writes JSON (and a PNG of RSS, descriptors and tasks over time when matplotlib is installed);
exits 1 when the slope exceeds ``--max-slope-mb-per-h`` or any request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from gateway.auth.keys import digest, new_key
from loadtests.bench.stats import percentile
from loadtests.processes import ADMIN_URLS, emulated_backend, gateway
from loadtests.results_file import fmt, write_results

MODEL = "soak-model"
ENGINE = {
    "max_num_seqs": 1024,
    "max_num_batched_tokens": 10_000_000,
    "prefill_tokens_per_s": 1e9,
    "decode_base_ms": 10,
    "decode_per_seq_ms": 0,
    "first_token_overhead_ms": 5,
}
SYSTEM_PROMPTS = [
    f"You are assistant number {n}. Answer briefly and precisely. " * 12 for n in range(8)
]
MAX_TOKENS = 8


@dataclass(frozen=True)
class Sample:
    t_s: float
    rss_bytes: int
    fds: int
    tasks: float | None
    loop_lag_s: float | None
    completed: int


@dataclass
class Load:
    completed: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    ttft: list[tuple[float, float]] = field(default_factory=list)  # (finished at, TTFT s)

    def fail(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1


async def _user(
    session: aiohttp.ClientSession,
    url: str,
    user: int,
    load: Load,
    start: float,
    until: float,
    keys: Sequence[str] = (),
) -> None:
    turn = 0
    while time.monotonic() < until:
        turn += 1
        body = {
            "model": MODEL,
            "stream": True,
            "max_tokens": MAX_TOKENS,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPTS[(user + turn) % len(SYSTEM_PROMPTS)]},
                {"role": "user", "content": f"user {user} turn {turn}: what changed? " * 6},
            ],
        }
        headers = {"Authorization": f"Bearer {keys[(user + turn) % len(keys)]}"} if keys else {}
        sent = time.monotonic()
        first: float | None = None
        try:
            async with session.post(
                url + "/v1/chat/completions", json=body, headers=headers
            ) as reply:
                if reply.status != 200:
                    load.fail(f"http_{reply.status}")
                    await reply.read()
                    continue
                done = False
                async for chunk in reply.content.iter_any():
                    if first is None:
                        first = time.monotonic()
                    done = done or b"data: [DONE]" in chunk
                if not done:
                    load.fail("truncated")
                    continue
        except (aiohttp.ClientError, TimeoutError) as exc:
            load.fail(type(exc).__name__)
            continue
        load.completed += 1
        if first is not None:
            load.ttft.append((time.monotonic() - start, first - sent))


def _rss_and_fds(pid: int) -> tuple[int, int]:
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def _loop_gauges(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(ADMIN_URLS.get(url, url) + "/metrics") as reply:
        text = await reply.text()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("meridian_event_loop")
        for s in family.samples
    }


async def _sampler(
    url: str, pid: int, load: Load, start: float, every_s: float, samples: list[Sample]
) -> None:
    async with aiohttp.ClientSession() as session:
        while True:
            rss, fds = _rss_and_fds(pid)
            try:
                gauges = await _loop_gauges(session, url)
            except aiohttp.ClientError:
                gauges = {}
            samples.append(
                Sample(
                    t_s=time.monotonic() - start,
                    rss_bytes=rss,
                    fds=fds,
                    tasks=gauges.get("meridian_event_loop_tasks"),
                    loop_lag_s=gauges.get("meridian_event_loop_lag_seconds"),
                    completed=load.completed,
                )
            )
            await asyncio.sleep(every_s)


def api_keys(count: int, tenants: int = 10) -> tuple[list[str], list[dict[str, str]]]:
    """``count`` API keys (what clients send) and their config entries, over ``tenants``."""
    keys, entries = [], []
    for n in range(count):
        key, key_id = new_key()
        keys.append(key)
        entries.append({"id": key_id, "sha256": digest(key), "tenant": f"tenant-{n % tenants}"})
    return keys, entries


def slope_per_s(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of ``ys`` over ``xs``; None with fewer than three points."""
    if len(xs) < 3:
        return None
    return float(np.polyfit(np.asarray(xs), np.asarray(ys, dtype=np.float64), 1)[0])


@dataclass(frozen=True)
class SoakReport:
    duration_s: float
    concurrency: int
    requests: int
    errors: int
    error_kinds: dict[str, int]
    request_per_s: float
    rss_start_mb: float
    rss_end_mb: float
    rss_slope_mb_per_h: float | None
    rss_bytes_per_request: float | None
    fds_slope_per_h: float | None
    tasks_slope_per_h: float | None
    loop_lag_p99_ms: float | None
    ttft_first_p50_ms: float | None
    ttft_first_p99_ms: float | None
    ttft_last_p50_ms: float | None
    ttft_last_p99_ms: float | None
    ttft_p99_drift: float | None  # last window's p99 / first window's p99 - 1
    window_s: float
    max_slope_mb_per_h: float

    @property
    def passed(self) -> bool:
        slope = self.rss_slope_mb_per_h
        return self.errors == 0 and slope is not None and slope <= self.max_slope_mb_per_h


def _ms(values: Sequence[float], q: float) -> float | None:
    return None if not values else (percentile(values, q) or 0.0) * 1000


def summarize(
    samples: list[Sample], load: Load, args: argparse.Namespace, duration_s: float
) -> SoakReport:
    steady = [s for s in samples if s.t_s >= args.warmup_s]
    xs = [s.t_s for s in steady]
    rss_slope = slope_per_s(xs, [s.rss_bytes for s in steady])
    fds_slope = slope_per_s(xs, [s.fds for s in steady])
    with_tasks = [s for s in steady if s.tasks is not None]
    tasks_slope = slope_per_s([s.t_s for s in with_tasks], [s.tasks or 0.0 for s in with_tasks])
    rate = load.completed / duration_s if duration_s > 0 else 0.0
    window = min(300.0, max(1.0, (duration_s - args.warmup_s) / 4))
    first = [v for t, v in load.ttft if args.warmup_s <= t < args.warmup_s + window]
    last = [v for t, v in load.ttft if t >= duration_s - window]
    first_p99, last_p99 = _ms(first, 99), _ms(last, 99)
    lags = [s.loop_lag_s for s in steady if s.loop_lag_s is not None]
    hour = 3600.0
    return SoakReport(
        duration_s=duration_s,
        concurrency=args.concurrency,
        requests=load.completed + load.errors,
        errors=load.errors,
        error_kinds=load.error_kinds,
        request_per_s=rate,
        rss_start_mb=samples[0].rss_bytes / 1e6 if samples else 0.0,
        rss_end_mb=samples[-1].rss_bytes / 1e6 if samples else 0.0,
        rss_slope_mb_per_h=None if rss_slope is None else rss_slope * hour / 1e6,
        rss_bytes_per_request=None if rss_slope is None or rate <= 0 else rss_slope / rate,
        fds_slope_per_h=None if fds_slope is None else fds_slope * hour,
        tasks_slope_per_h=None if tasks_slope is None else tasks_slope * hour,
        loop_lag_p99_ms=None if not lags else (percentile(lags, 99) or 0.0) * 1000,
        ttft_first_p50_ms=_ms(first, 50),
        ttft_first_p99_ms=first_p99,
        ttft_last_p50_ms=_ms(last, 50),
        ttft_last_p99_ms=last_p99,
        ttft_p99_drift=None if not first_p99 or last_p99 is None else last_p99 / first_p99 - 1,
        window_s=window,
        max_slope_mb_per_h=args.max_slope_mb_per_h,
    )


def format_table(report: SoakReport) -> str:
    rows = [
        ("duration (s) / concurrency", f"{report.duration_s:.0f} / {report.concurrency}"),
        ("requests / errors", f"{report.requests} / {report.errors} {report.error_kinds or ''}"),
        ("streams/s", f"{report.request_per_s:.1f}"),
        ("RSS start -> end (MB)", f"{report.rss_start_mb:.1f} -> {report.rss_end_mb:.1f}"),
        ("RSS slope after warm-up (MB/h)", fmt(report.rss_slope_mb_per_h)),
        ("RSS growth per request (bytes)", fmt(report.rss_bytes_per_request, 1)),
        ("fds slope (/h) / tasks slope (/h)", f"{fmt(report.fds_slope_per_h)} / {fmt(report.tasks_slope_per_h)}"),
        ("event-loop lag p99 (ms)", fmt(report.loop_lag_p99_ms)),
        (f"TTFT p50/p99 first {report.window_s:.0f} s (ms)", f"{fmt(report.ttft_first_p50_ms)} / {fmt(report.ttft_first_p99_ms)}"),
        (f"TTFT p50/p99 last {report.window_s:.0f} s (ms)", f"{fmt(report.ttft_last_p50_ms)} / {fmt(report.ttft_last_p99_ms)}"),
        ("TTFT p99 drift", fmt(None if report.ttft_p99_drift is None else report.ttft_p99_drift * 100, 1) + " %"),
        ("verdict", f"{'PASS' if report.passed else 'FAIL'} (slope limit {report.max_slope_mb_per_h} MB/h, 0 errors)"),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def plot(samples: list[Sample], warmup_s: float, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    t = [s.t_s for s in samples]
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    axes[0].plot(t, [s.rss_bytes / 1e6 for s in samples])
    axes[0].set_ylabel("RSS (MB)")
    axes[1].plot(t, [s.fds for s in samples])
    axes[1].set_ylabel("open fds")
    axes[2].plot(t, [s.tasks if s.tasks is not None else float("nan") for s in samples])
    axes[2].set_ylabel("asyncio tasks")
    axes[2].set_xlabel("seconds")
    for ax in axes:
        ax.axvline(warmup_s, color="grey", linestyle="--", linewidth=0.8)
    fig.suptitle("meridian gateway under a steady streaming soak")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


async def soak(args: argparse.Namespace) -> tuple[SoakReport, list[Sample]]:
    async with (
        emulated_backend("soak-a", MODEL, ENGINE) as (url_a, _),
        emulated_backend("soak-b", MODEL, ENGINE) as (url_b, _),
    ):
        backends = [
            {"name": name, "region": "local", "url": url + "/v1", "models": [MODEL],
             "max_connections": 4096}
            for name, url in (("soak-a", url_a), ("soak-b", url_b))
        ]  # fmt: skip
        config: dict[str, object] = {
            "backends": backends,
            "routing": {"policy": "predicted_ttft", "params": {"prefix_ttl_s": args.prefix_ttl_s}},
        }
        keys, entries = api_keys(args.keys)
        if keys:  # keys, tenants and their quotas on every request (generous: none refused)
            generous = {"rps": 1e6, "tokens_per_minute": 10**12}
            config["auth"] = {"mode": "keys", "keys": entries}
            config["quotas"] = {"per_key": generous, "per_tenant": generous}
        async with gateway(config) as (url, pid):
            load, samples = Load(), list[Sample]()
            start = time.monotonic()
            until = start + args.duration_s
            sampler = asyncio.create_task(_sampler(url, pid, load, start, args.sample_s, samples))
            connector = aiohttp.TCPConnector(limit=args.concurrency)
            timeout = aiohttp.ClientTimeout(total=60)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                await asyncio.gather(
                    *(
                        _user(session, url, u, load, start, until, keys)
                        for u in range(args.concurrency)
                    )
                )
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            duration = time.monotonic() - start
    return summarize(samples, load, args, duration), samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_soak", description=__doc__)
    parser.add_argument("--duration-s", type=float, default=1800.0)
    parser.add_argument("--concurrency", type=int, default=500)
    parser.add_argument("--warmup-s", type=float, default=None, help="default: prefix TTL + 60 s")
    parser.add_argument("--prefix-ttl-s", type=float, default=600.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--max-slope-mb-per-h", type=float, default=2.0)
    parser.add_argument(
        "--keys",
        type=int,
        default=0,
        help="API keys the clients rotate through (over 10 tenants, each key and tenant with a "
        "generous quota); 0: auth off",
    )
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    if args.warmup_s is None:
        args.warmup_s = min(args.prefix_ttl_s + 60.0, args.duration_s / 2)
    import uvloop

    report, samples = uvloop.run(soak(args))
    print(format_table(report))
    path = write_results(
        args.out,
        "soak",
        {
            "benchmark": "soak",
            "engine": ENGINE,
            "args": vars(args),
            "report": asdict(report),
            "passed": report.passed,
            "samples": [asdict(s) for s in samples],
        },
    )
    picture = plot(samples, args.warmup_s, path.with_suffix(".png"))
    if picture is not None:
        print(f"wrote {picture}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
