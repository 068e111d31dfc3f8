"""The relay's Python work per SSE event, alone: ``UpstreamExchange``'s (older checkouts:
``OpenedStream``'s) reading, splitting, checking
and batching of an upstream stream, without sockets (whose send()/recv() cost is the same for
every version of this code). Each checkout runs in its own process, in the same run.

    python -m loadtests.bench_relay_events [--src base=/tmp/main ...] [--events 20000]

The upstream is a reader that suspends once per read (as a real one does) and returns
``--per-read`` chat chunks of vLLM's shape each time; thread CPU per event, best of 5. An
end-to-end per-event figure (with system calls) is ``bench_peers``' CPU column.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

TOKEN = (
    b"data: "
    + orjson.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [
                {"index": 0, "delta": {"content": " the"}, "logprobs": None, "finish_reason": None}
            ],
        }
    )
    + b"\n\n"
)


class _Content:
    limit = 2**16  # the upstream reader's read size (newer checkouts read at most this)

    def __init__(self, events: int, per_read: int) -> None:
        self.left, self.per_read, self.total_bytes = events, per_read, 0

    async def readany(self, limit: int = 0) -> bytes:
        await asyncio.sleep(0)
        if self.left <= 0:
            return b"data: [DONE]\n\n"
        count = min(self.per_read, self.left)
        self.left -= count
        return TOKEN * count

    def set_exception(self, exc: BaseException) -> None:
        return None


class _Response:
    def __init__(self, events: int, per_read: int) -> None:
        self.content = _Content(events, per_read)
        self.headers: dict[str, str] = {}

    def release(self) -> None:
        return None

    def close(self) -> None:
        return None


async def _one(events: int, per_read: int) -> float:
    from gateway import stream
    from gateway.sse import SseSplitter
    from gateway.timing import StreamStats
    from routing.types import BackendKind, BackendSpec

    response: Any = _Response(events, per_read)
    parts: dict[str, Any] = {
        "response": response,
        "stats": StreamStats(started_at=time.perf_counter()),
        "splitter": SseSplitter(),
    }
    opened: Any
    if hasattr(stream, "UpstreamExchange"):  # the upstream exchange is its own object
        opened = stream.UpstreamExchange(**parts)
    else:  # older checkouts: one OpenedStream, in the same module
        older: Any = stream
        opened = older.OpenedStream(
            spec=BackendSpec("b", "r", BackendKind.DEDICATED, frozenset({"m"})),
            route=older.RouteInfo("b", "r", "dedicated", 1),
            entries=[],
            **parts,
        )
    relayed = 0
    start = time.thread_time_ns()
    batches = getattr(opened, "all_batches", None)
    if batches is not None:  # one write per upstream read
        async for batch in batches():
            _ = b"".join([event.raw for event in batch])
            relayed += len(batch)
    else:  # older checkouts: one event at a time
        async for event in opened.all_events():
            _ = event.raw
            relayed += 1
    opened.close()
    return (time.thread_time_ns() - start) / relayed / 1000.0


def _child(events: int, per_read: int) -> None:
    import uvloop

    print(min(uvloop.run(_one(events, per_read)) for _ in range(5)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_relay_events")
    parser.add_argument("--src", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--per-read", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.events, args.per_read[0])
        return 0
    here = Path(__file__).resolve().parents[1]
    sides = [("this checkout", here)]
    sides += [(name, Path(src)) for name, _, src in (s.partition("=") for s in args.src)]
    print(f"{'side':<16}{'events/read':>12}{'us/event':>10}{'vs first':>10}")
    first: dict[int, float] = {}
    for name, src in sides:
        for per_read in args.per_read:
            env = {**os.environ, "PYTHONPATH": str(src)}
            # Run as a script (sys.path[0] is loadtests/), so ``gateway`` comes from ``src``.
            argv_child = [sys.executable, str(Path(__file__).resolve()), "--child"]
            argv_child += ["--events", str(args.events), "--per-read", str(per_read)]
            out = subprocess.run(argv_child, env=env, cwd=src, check=True, capture_output=True)
            us = float(out.stdout.decode().split()[-1])
            base = first.setdefault(per_read, us)
            print(f"{name:<16}{per_read:>12}{us:>10.2f}{us / base:>9.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
