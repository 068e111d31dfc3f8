"""Shared state's cost on the request path: the same workload through a gateway on the in-memory
store and through one on Redis (with a second, idle replica sharing it), side by side in one run.

    python -m loadtests.bench_state [--requests N] [--rounds R] [--concurrency C] [--out DIR]

Processes: two emulated backends (``meridian emulate``), a ``redis-server``, three gateways
(``meridian serve``: memory, redis, redis peer) and this load generator. Memory and Redis runs
alternate (``--rounds`` times) so machine noise hits both alike; percentiles are over the pooled
requests of each side. From each response's ``Server-Timing``: ``route`` (routing decision) and
``gw`` (gateway overhead: time to first token minus upstream wait); from the client: TTFT.
The workload is multi-turn sessions over shared system prompts, so every request notes prefix
blocks and in-flight counts that the Redis side flushes, publishes and pulls in the background.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gateway.timing import parse
from loadtests.bench.records import BenchResult
from loadtests.bench.runner import BenchOptions, run_bench
from loadtests.bench.workload import parse_workload
from loadtests.processes import emulated_backend, gateway
from loadtests.results_file import write_results

MODEL = "state-model"
ENGINE = {
    "max_num_seqs": 1024,
    "max_num_batched_tokens": 1_000_000,
    "prefill_tokens_per_s": 2_000_000,
    "decode_base_ms": 5,
    "decode_per_seq_ms": 0,
    "first_token_overhead_ms": 5,
}
SIDES = ("memory", "redis")


@dataclass(frozen=True)
class Side:
    requests: int
    errors: int
    route_p50_ms: float
    route_p99_ms: float
    gw_p50_ms: float
    gw_p99_ms: float
    ttft_p50_ms: float
    ttft_p99_ms: float


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _side(results: list[BenchResult]) -> Side:
    records = [r for result in results for r in result.records]
    route: list[float] = []
    overhead: list[float] = []
    ttft = [r.ttft_s * 1000.0 for r in records if r.ok and r.ttft_s is not None]
    for record in records:
        entries = {e.name: e.dur_ms for e in parse(record.server_timing or "")}
        if entries.get("route") is not None:
            route.append(float(entries["route"] or 0.0))
        if entries.get("gw") is not None:
            overhead.append(float(entries["gw"] or 0.0))
    return Side(
        requests=len(records),
        errors=sum(1 for r in records if not r.ok),
        route_p50_ms=_pct(route, 0.5),
        route_p99_ms=_pct(route, 0.99),
        gw_p50_ms=_pct(overhead, 0.5),
        gw_p99_ms=_pct(overhead, 0.99),
        ttft_p50_ms=_pct(ttft, 0.5),
        ttft_p99_ms=_pct(ttft, 0.99),
    )


def _workload(concurrency: int, requests: int) -> dict[str, object]:
    return {
        "name": f"state-c{concurrency}",
        "seed": 11,
        "model": MODEL,
        "arrival": {"mode": "closed", "concurrency": concurrency},
        "limits": {"requests": requests},
        "request_timeout_s": 60,
        "mix": [
            {
                "kind": "session",
                "turns": [2, 4],
                "system_prompt": {"groups": 16, "tokens": 1024},
                "user_tokens": [32, 96],
                "max_tokens": 8,
            }
        ],
    }


@contextlib.contextmanager
def _redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: run scripts/install_redis.sh")
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
        argv += ["--appendonly", "no", "--dir", tmp, "--logfile", str(Path(tmp) / "redis.log")]
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        try:
            _wait_listening(port)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise SystemExit(f"redis-server did not listen on port {port} within {timeout_s}s")


def _config(backends: Sequence[tuple[str, str]], state: dict[str, Any]) -> dict[str, Any]:
    return {
        "region": "r1",
        "regions": [{"name": "r1", "rtt_ms": 1.0}],
        "backends": [
            {"name": name, "region": "r1", "url": url + "/v1", "models": [MODEL]}
            for name, url in backends
        ],
        "state": state,
    }


@contextlib.asynccontextmanager
async def _tier() -> AsyncIterator[dict[str, str]]:
    """URLs of the memory gateway and the measured Redis gateway (its peer runs alongside)."""
    async with contextlib.AsyncExitStack() as stack:
        backends = []
        for name in ("s1", "s2"):
            url, _ = await stack.enter_async_context(emulated_backend(name, MODEL, ENGINE))
            backends.append((name, url))
        redis_url = stack.enter_context(_redis_server())
        shared = {"backend": "redis", "url": redis_url, "key_prefix": f"b{uuid.uuid4().hex[:8]}"}
        urls = {}
        urls["memory"], _ = await stack.enter_async_context(gateway(_config(backends, {})))
        urls["redis"], _ = await stack.enter_async_context(gateway(_config(backends, shared)))
        await stack.enter_async_context(gateway(_config(backends, shared)))  # the peer
        yield urls


async def measure(concurrency: int, requests: int, rounds: int) -> dict[str, Side]:
    workload = parse_workload(_workload(concurrency, requests))
    options = BenchOptions(max_connections=concurrency)
    async with _tier() as urls:
        for side in SIDES:  # warm connection pools, caches and learned estimates
            await run_bench(urls[side], parse_workload(_workload(concurrency, 100)), options)
        results: dict[str, list[BenchResult]] = {side: [] for side in SIDES}
        for _ in range(rounds):
            for side in SIDES:
                results[side].append(await run_bench(urls[side], workload, options))
    return {side: _side(results[side]) for side in SIDES}


def format_table(sides: dict[str, Side]) -> str:
    fields: tuple[str, ...] = ("route_p50_ms", "route_p99_ms", "gw_p50_ms", "gw_p99_ms")
    fields += ("ttft_p50_ms", "ttft_p99_ms")
    header = f"{'side':>8} {'reqs':>6} {'err':>4} " + " ".join(f"{f[:-3]:>10}" for f in fields)
    lines = [header, "-" * len(header)]
    for name, side in sides.items():
        values = " ".join(f"{getattr(side, f):>10.3f}" for f in fields)
        lines.append(f"{name:>8} {side.requests:>6} {side.errors:>4} {values}")
    memory, redis = sides["memory"], sides["redis"]
    ratios = " ".join(f"{getattr(redis, f) / getattr(memory, f):>9.2f}x" for f in fields)
    lines.append(f"{'ratio':>8} {'':>6} {'':>4} {ratios}")
    lines.append("(ms; route = routing decision, gw = gateway overhead; ratio = redis/memory)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_state", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=600, help="per side per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    import uvloop

    sides = uvloop.run(measure(args.concurrency, args.requests, args.rounds))
    print(format_table(sides))
    payload = {
        "benchmark": "state_store_overhead",
        "concurrency": args.concurrency,
        "requests_per_round": args.requests,
        "rounds": args.rounds,
        "engine": ENGINE,
        "sides": {name: asdict(side) for name, side in sides.items()},
    }
    write_results(args.out, "state", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
