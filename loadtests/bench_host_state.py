"""What the workers of one host spend keeping their state shared, per request, in CPU time.

    python -m loadtests.bench_host_state [--workers 2] [--rate 300] [--seconds 5]
        [--blocks 8] [--rounds 3] [--src before=DIR ...]

One process holds the host coordinator (``HostStateServer``, as the supervisor of ``meridian
serve --workers N`` does) and N ``SharedStateSync`` replicas on ``HostStore`` clients (as the
workers do), with the intervals of the default config. Requests arrive at ``--rate`` per second
spread over the replicas; each does what a routed request does to shared state (in flight +1,
its prompt's ``--blocks`` chain noted at the decision, then noted again once served and in
flight -1, ~100 ms later). Reported: the process's CPU per request (flushes, the coordinator,
events, refreshes, merging peers' blocks into each view; feeding them to a router's index is
not included) and the same with the background tasks stopped (the request-path calls and
this harness's pacing alone; "background" is the difference). A wall-clock-paced run on a
busy host still gives comparable CPU figures; ``--src NAME=DIR`` runs this script against
another checkout's ``gateway`` (``PYTHONPATH``) in every round: before/after from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gateway.state.config import StateConfig
from gateway.state.host_server import HostStateServer
from gateway.state.sync import SharedStateSync

SERVED_AFTER_S = 0.1  # a request's decision to its end (the overhead benchmark's 16 tokens)


async def _run(workers: int, rate: float, seconds: float, blocks: int, shared: bool) -> float:
    """CPU µs per request of ``seconds`` of requests at ``rate``; ``shared=False``: the same
    request-path calls with no background task running (nothing shared)."""
    with tempfile.TemporaryDirectory() as tmp:
        server = HostStateServer(str(Path(tmp) / "state.sock"))
        await server.start()
        config = StateConfig.model_validate({"backend": "host", "url": f"unix://{server.path}"})
        syncs = [SharedStateSync.from_config(config, replica_id=f"w{i}") for i in range(workers)]
        if shared:
            for sync in syncs:
                await sync.start()
            await asyncio.sleep(1.0)  # subscribed, first pulls done
        rng = random.Random(7)
        loop = asyncio.get_running_loop()
        total = int(rate * seconds)
        cpu = time.process_time()
        start = loop.time()
        done = asyncio.Event()
        finished = 0

        def served(sync: SharedStateSync, chain: list[int]) -> None:
            nonlocal finished
            sync.note_prefix("b1", chain)
            sync.note_in_flight("b1", -1)
            finished += 1
            if finished == total:
                done.set()

        for index in range(total):
            due = start + index / rate
            if (delay := due - loop.time()) > 0:
                await asyncio.sleep(delay)
            sync = syncs[index % workers]
            chain = [rng.getrandbits(63) for _ in range(blocks)]
            sync.note_in_flight("b1", +1)
            sync.note_prefix("b1", chain)
            loop.call_later(SERVED_AFTER_S, served, sync, chain)
        await done.wait()
        if shared:
            await asyncio.sleep(1.5)  # the last flushes, events and a refresh
        spent = time.process_time() - cpu
        for sync in syncs:
            await sync.stop()
        await server.close()
        return spent / total * 1e6


def _other(src: str, args: argparse.Namespace) -> dict[str, float]:
    # This script, with the other checkout's ``gateway`` first on the path (it may predate
    # the script); run from there so nothing of this checkout is imported by accident.
    argv = [sys.executable, str(Path(__file__).resolve()), "--rounds", "1", "--json"]
    argv += ["--workers", str(args.workers), "--rate", str(args.rate)]
    argv += ["--seconds", str(args.seconds), "--blocks", str(args.blocks)]
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(argv, cwd=src, env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    if Path(result.pop("code")).resolve() != Path(src).resolve():
        raise SystemExit(f"--src {src}: the run imported another checkout's gateway")
    return {k: float(v) for k, v in result.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench_host_state", description=__doc__
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=300.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--blocks", type=int, default=8, help="prefix blocks per prompt")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--json", action="store_true", help="one round, JSON on stdout")
    args = parser.parse_args(argv)
    import uvloop

    def this() -> dict[str, float]:
        measure = args.workers, args.rate, args.seconds, args.blocks
        return {
            "shared": uvloop.run(_run(*measure, shared=True)),
            "request_path_only": uvloop.run(_run(*measure, shared=False)),
        }

    if args.json:
        import gateway.state.sync

        print(json.dumps({**this(), "code": str(Path(gateway.state.sync.__file__).parents[2])}))
        return 0
    sources = {name: src for name, _, src in (s.partition("=") for s in args.src)}
    rounds: dict[str, list[dict[str, float]]] = {"this": [], **{name: [] for name in sources}}
    for _ in range(args.rounds):
        rounds["this"].append(this())
        for name, src in sources.items():
            rounds[name].append(_other(src, args))
    print(
        f"{args.workers} replicas, {args.rate:.0f} requests/s, {args.blocks} blocks a prompt, "
        f"load average {os.getloadavg()[0]:.1f}; CPU us per request, median of {args.rounds}"
    )
    print(f"{'side':>10} {'shared':>10} {'not shared':>11} {'background':>11}")
    for name, results in rounds.items():
        shared = sorted(r["shared"] for r in results)[len(results) // 2]
        alone = sorted(r["request_path_only"] for r in results)[len(results) // 2]
        print(f"{name:>10} {shared:>10.1f} {alone:>11.1f} {shared - alone:>11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
