"""The servers the accuracy benchmark measures against, each in its own process.

``emulator``: ``meridian emulate`` with fixed timing (the faithful server; its own TTFT and ITL,
exact means from its ``/metrics`` histograms, are the reference). ``pacer``: the minimal
``loadtests.bench.pacer`` (exact per-stream timers; the configured values are the reference).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

import aiohttp
import orjson

MODEL = "emulated-model"
SERVER_KINDS = ("pacer", "emulator")


def _argv(kind: str, itl_ms: float, ttft_ms: float) -> list[str]:
    if kind == "pacer":
        timing = ["--itl-ms", str(itl_ms), "--ttft-ms", str(ttft_ms)]
        return [sys.executable, "-m", "loadtests.bench.pacer", *timing]
    engine = {
        "max_num_seqs": 100_000,  # never queue
        "max_num_batched_tokens": 100_000_000,
        "prefill_tokens_per_s": 1e12,  # prefill takes no time
        "decode_base_ms": itl_ms,
        "decode_per_seq_ms": 0,  # batch size does not slow decode
        "first_token_overhead_ms": ttft_ms,
        "kv_cache_blocks": 1_000_000,
    }
    argv = [sys.executable, "-m", "gateway.cli", "emulate", "--backend", "acc", "--model", MODEL]
    for key, value in engine.items():
        argv += ["--engine", f"{key}={value}"]
    return argv


@contextlib.asynccontextmanager
async def server_process(
    kind: str, itl_ms: float, ttft_ms: float
) -> AsyncIterator[tuple[str, int]]:
    """Start the server, wait for its ``{"ready": true}`` line; yields (url, pid)."""
    process = await asyncio.create_subprocess_exec(
        *_argv(kind, itl_ms, ttft_ms), stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    try:
        url = ""
        while True:
            line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
            if not line:
                raise RuntimeError(f"the {kind} server exited before it was ready")
            message = orjson.loads(line)
            url = message.get("url", url)
            if message.get("ready"):
                break
        yield url, process.pid
    finally:
        process.terminate()
        await process.wait()


async def reference_means(
    kind: str, url: str, itl_ms: float, ttft_ms: float
) -> tuple[float | None, float | None]:
    """Mean TTFT and ITL in ms that the server itself produced."""
    if kind == "pacer":
        return ttft_ms, itl_ms
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as response:
        text = await response.text()
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vllm:") and ("_sum{" in line or "_count{" in line):
            name = line.split("{", 1)[0]
            totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])

    def mean(metric: str) -> float | None:
        count = totals.get(f"{metric}_count", 0.0)
        return totals[f"{metric}_sum"] / count * 1000.0 if count else None

    return mean("vllm:time_to_first_token_seconds"), mean("vllm:inter_token_latency_seconds")
