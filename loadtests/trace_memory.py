"""Where does a steady gateway's memory go? tracemalloc snapshot diffs between idle points.

    python -m loadtests.trace_memory [--rounds 4] [--streams 3000] [--concurrency 60]
                                     [--prefix-ttl-s 3] [--keys 40] [--addresses 16] [--top 20]

The gateway runs in this process under ``tracemalloc``; two emulated engines and the load
client run as separate processes, so what is traced is the gateway's own. The gateway is
configured the way the per-request structures get exercised: API keys (tenants come from keys),
per-key and per-tenant quotas (generous: nothing is refused), per-tenant admission gates, a
prefix TTL much shorter than a round and a sweep every second. Each round the client streams
``--streams`` requests from ``--addresses`` loopback source addresses with ``--keys`` keys and
unique user turns, then exits; the gateway is left idle past the prefix TTL, the sweep and the
keep-alive timeout, and a snapshot is taken. Rounds after the first are diffed against the
first, grouped by traceback: a line that grows round after round is memory kept per request
(or per key, tenant, address...) that is never freed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import tracemalloc
from typing import Any

import aiohttp

from loadtests.bench_soak import api_keys

MODEL = "trace-model"
ENGINE = {"decode_base_ms": 2, "decode_per_seq_ms": 0, "first_token_overhead_ms": 1,
          "prefill_tokens_per_s": 1e9, "max_num_seqs": 1024}  # fmt: skip
SYSTEM = [f"You are assistant number {n}. Answer briefly. " * 12 for n in range(8)]


async def _client(url: str, streams: int, concurrency: int, keys: list[str], addresses: int,
                  salt: str) -> dict[str, int]:  # fmt: skip
    """The load, in its own process: ``streams`` streams, from ``addresses`` source addresses."""
    sessions = [
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, local_addr=(f"127.0.0.{2 + n}", 0))
        )
        for n in range(addresses)
    ]
    left = iter(range(streams))
    errors: dict[str, int] = {}

    async def user(u: int) -> None:
        for n in left:
            body = {
                "model": MODEL,
                "stream": True,
                "max_tokens": 4,
                "messages": [
                    {"role": "system", "content": SYSTEM[n % len(SYSTEM)]},
                    {"role": "user", "content": f"{salt} request {n}: what changed? " * 6},
                ],
            }
            headers = {"Authorization": f"Bearer {keys[n % len(keys)]}"}
            session = sessions[(u + n) % len(sessions)]
            try:
                async with session.post(url + "/v1/chat/completions", json=body,
                                        headers=headers) as reply:  # fmt: skip
                    text = await reply.read()
                    if reply.status != 200 or b"[DONE]" not in text:
                        kind = f"{reply.status} {text[:120]!r}"
                        errors[kind] = errors.get(kind, 0) + 1
            except aiohttp.ClientError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

    await asyncio.gather(*(user(u) for u in range(concurrency)))
    for session in sessions:
        await session.close()
    return errors


def _config(urls: list[str], entries: list[dict[str, str]], ttl_s: float) -> Any:
    from gateway.config import parse_config

    limits = {"rps": 1e6, "tokens_per_minute": 10**12}
    return parse_config(
        {
            "backends": [
                {"name": f"b{n}", "region": "local", "url": url + "/v1", "models": [MODEL]}
                for n, url in enumerate(urls)
            ],
            "routing": {
                "policy": "predicted_ttft",
                "params": {"prefix_ttl_s": ttl_s},
                "prefix_sweep_interval_s": 1.0,
            },
            "auth": {"mode": "keys", "keys": entries},
            "quotas": {"per_key": limits, "per_tenant": limits},
            "admission": {"per_tenant": {"max_concurrent": 10_000, "max_queue": 10}},
        },
        "<trace_memory>",
    )


def _report(base: tracemalloc.Snapshot, now: tracemalloc.Snapshot, top: int, streams: int) -> None:
    ignore = [
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
        tracemalloc.Filter(False, "*/linecache.py"),
        tracemalloc.Filter(False, "*/fnmatch.py", all_frames=True),  # these filters' own patterns
    ]
    diff = now.filter_traces(ignore).compare_to(base.filter_traces(ignore), "traceback")
    total = sum(d.size_diff for d in diff)
    print(f"  retained since round 1: {total / 1e3:+.1f} kB ({total / streams:+.1f} B/stream)")
    for stat in sorted(diff, key=lambda d: -abs(d.size_diff))[:top]:
        if stat.size_diff == 0:
            break
        frames = [
            f"{f.filename.rsplit('site-packages/', 1)[-1]}:{f.lineno}"
            for f in stat.traceback
            if "asyncio" not in f.filename
        ]
        print(f"  {stat.size_diff / 1e3:+9.1f} kB {stat.count_diff:+7d} blocks  "
              f"{' <- '.join(reversed(frames[-6:]))}")  # fmt: skip


async def _run(args: argparse.Namespace) -> None:
    from gateway.app import start_gateway
    from loadtests.processes import emulated_backend

    keys, entries = api_keys(args.keys)
    async with (
        emulated_backend("t-a", MODEL, ENGINE) as (url_a, _),
        emulated_backend("t-b", MODEL, ENGINE) as (url_b, _),
    ):
        running = await start_gateway(_config([url_a, url_b], entries, args.prefix_ttl_s),
                                      "127.0.0.1", 0)  # fmt: skip
        base: tracemalloc.Snapshot | None = None
        try:
            for round_ in range(1, args.rounds + 1):
                started = time.monotonic()
                client = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "loadtests.trace_memory", "--client", running.url,
                    "--streams", str(args.streams), "--concurrency", str(args.concurrency),
                    "--addresses", str(args.addresses), "--salt", f"r{round_}",
                    *(arg for key in keys for arg in ("--key", key)),
                    stdout=asyncio.subprocess.PIPE,
                )  # fmt: skip
                out, _ = await client.communicate()
                rate = args.streams / (time.monotonic() - started)
                # Idle past the prefix TTL and a sweep (the client has closed its connections).
                await asyncio.sleep(args.prefix_ttl_s + 3.0)
                gc.collect()
                snapshot = tracemalloc.take_snapshot()
                traced, _ = tracemalloc.get_traced_memory()
                print(f"round {round_}: {args.streams} streams at {rate:.0f}/s, client errors "
                      f"{out.decode().strip()}, traced {traced / 1e6:.2f} MB", flush=True)  # fmt: skip
                if base is None:
                    base = snapshot
                else:
                    _report(base, snapshot, args.top, args.streams * (round_ - 1))
        finally:
            await running.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.trace_memory", description=__doc__)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--streams", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=60)
    parser.add_argument("--prefix-ttl-s", type=float, default=3.0)
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--addresses", type=int, default=16)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--frames", type=int, default=12)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--key", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--salt", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import uvloop

    if args.client:
        errors = uvloop.run(_client(args.client, args.streams, args.concurrency, args.key,
                                    args.addresses, args.salt))  # fmt: skip
        print(errors)
        return 0
    tracemalloc.start(args.frames)
    uvloop.run(_run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
