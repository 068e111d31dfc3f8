"""The client side of ``loadtests/bench_grpc_overhead.py``: one chat stream over HTTP or gRPC
timed to its first content (every side measured the same way), the channels a gRPC side calls
on, and the closed loop that runs a side's requests and pools what they gave."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson

from gateway.sse import SseSplitter
from loadtests.bench.grpc_overhead_table import Side, side_from
from proto.meridian.v1 import inference_pb2 as pb

MODEL = "grpc-overhead-model"
PROMPT = "Summarise the route a request takes through a multi-region gateway. " * 4
MAX_TOKENS = 8

Measure = Callable[[], Awaitable[float]]  # one request; returns its TTFT in seconds


def _chat_body(max_tokens: int) -> bytes:
    return orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens,
            "stream": True,
        }
    )


def _has_content(data: bytes) -> bool:
    chunk = orjson.loads(data)
    return any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or ())


def http_measure(
    session: aiohttp.ClientSession, base_url: str, max_tokens: int = MAX_TOKENS
) -> Measure:
    url, body = base_url + "/v1/chat/completions", _chat_body(max_tokens)
    headers = {"Content-Type": "application/json"}

    async def one() -> float:
        started = time.perf_counter()
        ttft: float | None = None
        splitter = SseSplitter()
        async with session.post(url, data=body, headers=headers) as response:
            response.raise_for_status()
            async for raw in response.content.iter_any():
                for event in splitter.feed(raw):
                    if (
                        ttft is None
                        and event.data
                        and not event.is_done
                        and _has_content(event.data)
                    ):
                        ttft = time.perf_counter() - started
        if ttft is None:
            raise RuntimeError("stream carried no content")
        return ttft

    return one


def grpc_measure(stub: Any, max_tokens: int = MAX_TOKENS, *more_stubs: Any) -> Measure:
    """Calls on ``stub`` (with ``more_stubs``: on each in turn, e.g. one per connection)."""
    request = pb.ChatCompletionRequest(
        model=MODEL, messages=[pb.ChatMessage(role="user", text=PROMPT)], max_tokens=max_tokens
    )
    stubs = itertools.cycle((stub, *more_stubs))

    async def one() -> float:
        started = time.perf_counter()
        ttft: float | None = None
        async for chunk in next(stubs).ChatCompletion(request):
            if ttft is None and any(c.delta.content for c in chunk.choices):
                ttft = time.perf_counter() - started
        if ttft is None:
            raise RuntimeError("stream carried no content")
        return ttft

    return one


@dataclass
class Samples:
    ttfts: list[float]
    errors: int = 0
    gateway_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    gateway_switches: int = 0
    round_p50s: list[float | None] = dataclasses.field(default_factory=list)

    def side(self, through_gateway: bool) -> Side:
        n = max(len(self.ttfts) + self.errors, 1)
        gateway_cpu = self.gateway_cpu_s / n * 1e6 if through_gateway else None
        return replace(
            side_from(self.ttfts, self.errors),
            gateway_cpu_us=gateway_cpu,
            client_cpu_us=self.client_cpu_s / n * 1e6,
            gateway_switches=self.gateway_switches / n if through_gateway else None,
            round_ttft_p50_ms=tuple(self.round_p50s),
        )


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches of every thread of ``pid`` (Linux /proc)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # a thread that just ended
        for line in status.splitlines():
            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                total += int(line.rpartition(":")[2])
    return total


async def run_closed_loop(measure: Measure, requests: int, concurrency: int) -> Samples:
    ttfts: list[float] = []
    errors = 0
    remaining = requests

    async def worker() -> None:
        nonlocal remaining, errors
        while remaining > 0:
            remaining -= 1
            try:
                ttfts.append(await measure())
            except (aiohttp.ClientError, grpc.aio.AioRpcError, RuntimeError):
                errors += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Samples(ttfts, errors)


def channels_to(target: str, count: int) -> list[grpc.aio.Channel]:
    """``count`` channels to ``target``; more than one: each on a connection of its own (grpc
    shares one between channels with the same target and options otherwise)."""
    if count == 1:
        return [grpc.aio.insecure_channel(target)]
    own = [("grpc.use_local_subchannel_pool", 1)]
    return [grpc.aio.insecure_channel(target, options=own) for _ in range(count)]
