"""What the live router believes about each backend while a benchmark runs: the gateway's
route explanation (``GET /v1/meridian/route``, loopback only) for a one-word prompt, polled
every ``every_s``, each candidate's TTFT terms (``bias`` is the learned offset) and signal ages.
A replay's learned state can then be compared with the recording's at the same moment
(``python -m loadtests.bench_replay --watch-learner``; docs/replay.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import ClientSession


async def watch_learner(
    url: str, model: str, every_s: float, stop: asyncio.Event, out: Path
) -> None:
    """Poll until ``stop`` is set; write one JSON line per poll to ``out``: ``t_s`` (seconds
    since the watch began, the bench's own clock starts with it) and per ranked backend its
    predicted TTFT and terms (ms)."""
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    params = {"model": model, "prompt": "x", "origin": "us-east", "max_tokens": "1"}
    async with ClientSession() as session:
        while not stop.is_set():
            async with session.get(f"{url}/v1/meridian/route", params=params) as response:
                report = await response.json() if response.status == 200 else {}
            rows.append({
                "t_s": round(time.perf_counter() - start, 3),
                "backends": {
                    c["backend"]: {
                        "predicted_ttft_ms": c["predicted_ttft_ms"],
                        **{name: term["ms"] for name, term in c["terms"].items()},
                    }
                    for c in report.get("candidates", [])
                },
            })  # fmt: skip
            with contextlib.suppress(TimeoutError):  # a benchmark's poll interval, not a test
                await asyncio.wait_for(stop.wait(), every_s)
    data = b"".join(orjson.dumps(row) + b"\n" for row in rows)
    await asyncio.to_thread(out.write_bytes, data)
