"""Decision-cost micro-benchmark: profile building + prefix hashing + one routing decision.

100 (and 1,000) backends in 3 regions (10% serverless, 80% with engine metrics), a prefix index
warmed by earlier traffic (shared system prompts on many backends), and a ~4,000-token chat
prompt that shares one of those system prompts. The timed work is what the gateway does per
request: build the profile, decide, and read the chosen candidate's terms and p90 (learning
and hedging need them). Two snapshot regimes: ``same`` (one snapshot object for every
decision) and ``churn`` (a new snapshot per decision with one backend's in-flight count
changed, as the gateway's SignalHub builds them). Every policy is timed in the same run, and the
ratios are against round-robin's cost for the same work, so the table survives a slower machine.

    .venv/bin/python -m loadtests.bench_routing [--iterations 3000] [--backends 100 1000]
        [--policies predicted_ttft predicted_ttft:generic round_robin] [--out loadtests/results]
        [--src before=DIR ... --rounds 3] [--cold-mb 32] [--idle-ms 20] [--advance-ms 100]
        [--scalar-max N]

``POLICY:generic`` times the same policy forced through the generic pipeline
(``PipelineRouter._decide``), so a fused path is measured against it in the same run. ``cpu``
columns are the thread's CPU time per call (what the decision costs, without the time a busy
machine kept the process waiting).

``--cold-mb N`` streams through N MB between timed decisions (not timed), so each decision
starts with cold data caches; ``--idle-ms N`` sleeps N ms between them, as a gateway at
concurrency 1 idles between requests: on this VM the next decision then costs ~5x the hot one
(every distinct code path, numpy's ufunc dispatch above all, starts cold).
``--advance-ms N`` moves the decisions' clock N ms per decision (it is one fixed time
otherwise): what runs on a timer then runs as in a gateway, the exploration check above all
(every ``explore_recheck_s``, on most decisions at c=1; with a fixed clock it runs once).
``--scalar-max N`` moves the fleet size up to which ``predicted_ttft`` takes its scalar
(pure-Python) path (0: never; the router's default otherwise), to find where it stops paying.
The last row of each block size, ``host floor (fixed work)``, is a fixed pure-Python loop
sized to the decisions' CPU p50 and timed the same way: the p99 this host gives any work of
that size (on this 2-core VM ~1.4x its p50; the decisions read 1.7-2.0x, 1.5x with the
collector off). A decision's ``cpu p99/p50`` reads against it.
``--src NAME=DIR`` times another checkout's ``routing/`` (e.g. ``git archive main`` unpacked
in DIR) with this benchmark, as a side of the same run: each round runs every side once, in
turn, in its own process, and the table gives each side's median over the rounds and its CPU
p50 against this checkout's, and the lowest CPU p50 of any round (``min p50``: on a machine
this busy a whole process sometimes runs ~1.5x slower than the next one, so with few rounds
the median can land on either mode; the minimum is the run the machine disturbed least).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import routing.types
from loadtests.bench.routing_workload import (
    BACKENDS,
    NOW,
    SYSTEM_PROMPTS,
    chat_body,
    prompt_text,
    seeded_fleet,
)
from routing.policies import build_router
from routing.prefix import block_hashes, canonical_chat
from routing.profile import profile_from_chat
from routing.types import FleetSnapshot, Observation

# Marks a snapshot with what changed since the one before (None: a checkout without it).
_built_from = getattr(routing.types, "built_from", None)


def _warm(
    router: Any, fleet: FleetSnapshot, systems: list[str], rng: random.Random, block_tokens: int
) -> None:
    """Earlier traffic: 2,000 requests whose prefixes the index now remembers."""
    for i in range(2_000):
        body = chat_body(systems[i % len(systems)], prompt_text(rng, 800))
        profile = profile_from_chat(body, "tenant-a", block_tokens=block_tokens)
        decision = router.decide(profile, fleet, NOW - 60 + i * 0.01)
        chosen = decision.chosen
        if chosen is not None:
            router.observe(Observation(chosen.backend, NOW - 60 + i * 0.01, ok=True))


def _time(
    run: Callable[[], Any], after: Callable[[Any], None], iterations: int
) -> tuple[list[float], list[float]]:
    """Wall and CPU (this thread's) microseconds per call: on a shared machine the wall clock
    also counts the time the process waited for a core, the CPU clock only the work."""
    wall: list[float] = []
    cpu: list[float] = []
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    for _ in range(iterations):
        start, start_cpu = clock(), cpu_clock()
        result = run()
        cpu.append((cpu_clock() - start_cpu) / 1_000.0)
        wall.append((clock() - start) / 1_000.0)
        after(result)
    return wall, cpu


def _percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


class _Churn:
    """A new snapshot per decision, one backend's in-flight count changed (the rest reused),
    marked as built from the one before with that backend changed, as the SignalHub marks its
    snapshots (``routing.types.built_from``; an older checkout without it: no mark)."""

    def __init__(self, fleet: FleetSnapshot) -> None:
        self.fleet = fleet
        self.names = sorted(fleet.backends)
        self.turn = 0

    def advance(self) -> None:
        self.turn += 1
        name = self.names[(self.turn * 7919) % len(self.names)]
        backends = dict(self.fleet.backends)
        old = backends[name]
        backends[name] = dataclasses.replace(old, in_flight=(old.in_flight + 1) % 41)
        fleet = dataclasses.replace(self.fleet, backends=backends)
        self.fleet = fleet if _built_from is None else _built_from(fleet, self.fleet, (name,))


def _evictor(megabytes: int, idle_ms: float = 0.0) -> Callable[[], None]:
    """Between two timed decisions: stream through ``megabytes`` of memory (cold data caches)
    and/or sleep ``idle_ms`` (the process idles, as a gateway at c=1 does between requests:
    other processes then run on its core, and the next decision starts cold through and
    through). 0 and 0: nothing, caches stay hot."""
    import numpy as np

    buffer = np.zeros(max(megabytes, 0) * 131_072)  # 8-byte floats
    pause_s = max(idle_ms, 0.0) / 1000.0

    def evict() -> None:
        if len(buffer):
            np.add(buffer, 1.0, out=buffer)
        if pause_s:
            time.sleep(pause_s)

    return evict


def _case(
    policy: str,
    block_tokens: int,
    iterations: int,
    seed: int,
    size: int,
    churn: bool,
    cold_mb: int = 0,
    idle_ms: float = 0.0,
    scalar_max: int | None = None,
    advance_ms: float = 0.0,
) -> dict[str, float]:
    rng = random.Random(seed)
    fleet = seeded_fleet(rng, size)
    systems = [prompt_text(rng, 4_000) for _ in range(SYSTEM_PROMPTS)]
    params: Mapping[str, Any] = (
        {"block_tokens": block_tokens}
        if policy.removesuffix(GENERIC) in {"predicted_ttft", "cache_aware", "llm_d"}
        else {}
    )
    router = build_router(policy.removesuffix(GENERIC), params, seed)
    if scalar_max is not None and hasattr(router, "scalar_max"):  # an older checkout: none
        router.scalar_max = scalar_max
    _warm(router, fleet, systems, rng, block_tokens)
    decide = router.decide
    if policy.endswith(GENERIC):  # the same router, always through the generic pipeline
        decide = functools.partial(router._decide, commit=True)
    body = chat_body(systems[3], prompt_text(rng, 12_000))  # ~4,000 tokens in all
    snapshots = _Churn(fleet)
    evict = _evictor(cold_mb, idle_ms)

    clock = [NOW]  # the decisions' clock: fixed, or moving ``advance_ms`` per decision

    def run() -> Any:
        profile = profile_from_chat(body, "tenant-a", block_tokens=block_tokens)
        decision = decide(profile, snapshots.fleet, clock[0])
        chosen = decision.chosen
        if chosen is not None:  # what the gateway reads: terms to learn from, p90 to hedge
            _ = (chosen.terms_ms, chosen.predicted_ttft_p90_ms)
        return decision

    def after(decision: Any) -> None:
        if decision.chosen is not None:
            router.release(decision.chosen.backend)
        if churn:  # the gateway builds snapshots off the decision's clock too
            snapshots.advance()
        clock[0] += advance_ms / 1000.0
        evict()

    _time(run, after, 200 if idle_ms <= 0 else 20)
    return _summary(*_time(run, after, iterations))


def _summary(wall: list[float], cpu: list[float]) -> dict[str, float]:
    p50, p99 = _percentiles(wall)
    cpu_p50, cpu_p99 = _percentiles(cpu)
    return {"p50_us": p50, "p99_us": p99, "cpu_p50_us": cpu_p50, "cpu_p99_us": cpu_p99}


def _hash_only(block_tokens: int, iterations: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    body = chat_body(prompt_text(rng, 4_000), prompt_text(rng, 12_000))
    messages = body["messages"]
    samples = _time(
        lambda: block_hashes(canonical_chat(messages), "t", block_tokens),
        lambda _: None,
        iterations,
    )
    return _summary(*samples)


def _spin(rounds: int) -> int:
    total = 0
    for i in range(rounds):
        total += i * i
    return total


def _host_floor(target_us: float, iterations: int) -> dict[str, float]:
    """Fixed pure-Python work sized to ``target_us`` of CPU, timed as the decisions are. Its
    p99 is what this host gives any work of that size (timer ticks, neighbours on the VM):
    on this 2-core VM ~1.3-1.6x its p50, with nothing of the decision's in it. A decision's
    p99 over its p50 reads against this row's."""
    probe = 2_000
    _time(lambda: _spin(probe), lambda _: None, 200)
    unit = statistics.median(_time(lambda: _spin(probe), lambda _: None, 200)[1]) / probe
    rounds = max(1, round(target_us / unit))
    _time(lambda: _spin(rounds), lambda _: None, 200)
    return _summary(*_time(lambda: _spin(rounds), lambda _: None, iterations))


GENERIC = ":generic"  # suffix: the policy's router, forced through PipelineRouter._decide
ALL_POLICIES = (
    "round_robin", "predicted_ttft", "least_loaded", "latency_ewma", "cache_aware", "llm_d",
)  # fmt: skip


def _rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    policies = ["round_robin", *(p for p in args.policies if p != "round_robin")]
    for block_tokens in args.block_tokens:
        hashing = _hash_only(block_tokens, args.iterations, args.seed)
        rows.append({"case": "hashing only", "backends": 0, "snapshots": "-",
                     "block_tokens": block_tokens, **hashing})  # fmt: skip
        for size in args.backends:
            for churn in (False, True):
                for policy in policies:
                    timing = _case(policy, block_tokens, args.iterations, args.seed, size, churn,
                                   args.cold_mb, args.idle_ms, args.scalar_max,
                                   args.advance_ms)  # fmt: skip
                    rows.append({"case": policy, "backends": size,
                                 "snapshots": "churn" if churn else "same",
                                 "block_tokens": block_tokens, **timing})  # fmt: skip
        decided = [
            r["cpu_p50_us"] for r in rows if r["backends"] and r["block_tokens"] == block_tokens
        ]
        floor = _host_floor(statistics.median(decided), args.iterations)
        rows.append({"case": "host floor (fixed work)", "backends": 0, "snapshots": "-",
                     "block_tokens": block_tokens, **floor})  # fmt: skip
    return rows


def _side_rows(src: Path, argv: list[str]) -> list[dict[str, Any]]:
    """This benchmark's rows with ``routing`` imported from ``src`` (a child process)."""
    # Run as a script (sys.path[0] is loadtests/), so PYTHONPATH decides where routing is from.
    child = [sys.executable, str(Path(__file__).resolve()), *argv, "--child"]
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(child, env=env, cwd=src, check=True, capture_output=True)
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def _compare(args: argparse.Namespace, argv: list[str]) -> int:
    here = Path(__file__).resolve().parents[1]
    sides = [("this", here)]
    sides += [(name, Path(src)) for name, _, src in (s.partition("=") for s in args.src)]
    runs: dict[tuple[str, str, int, str, int], list[dict[str, Any]]] = {}
    for _ in range(args.rounds):
        for name, src in sides:
            for row in _side_rows(src, argv):
                key = (row["case"], name, row["backends"], row["snapshots"], row["block_tokens"])
                runs.setdefault(key, []).append(row)
    fields = ("p50_us", "p99_us", "cpu_p50_us", "cpu_p99_us")
    rows = [
        {"case": case, "side": side, "backends": size, "snapshots": snaps, "block_tokens": block,
         **{f: statistics.median(r[f] for r in samples) for f in fields},
         "cpu_p50_min_us": min(r["cpu_p50_us"] for r in samples)}
        for (case, side, size, snaps, block), samples in runs.items()
    ]  # fmt: skip
    ours = {(r["case"], r["backends"], r["snapshots"], r["block_tokens"]): r["cpu_p50_us"]
            for r in rows if r["side"] == "this"}  # fmt: skip
    ours_min = {(r["case"], r["backends"], r["snapshots"], r["block_tokens"]): r["cpu_p50_min_us"]
                for r in rows if r["side"] == "this"}  # fmt: skip
    print(f"{'case':<24}{'side':<10}{'block':>6}{'backends':>9}{'snapshots':>10}{'p50 us':>9}"
          f"{'p99 us':>9}{'cpu p50':>9}{'cpu p99':>9}{'cpu p50 vs this':>17}"
          f"{'min p50':>9}{'min vs this':>13}")  # fmt: skip
    for row in sorted(rows, key=lambda r: (r["block_tokens"], r["backends"], r["snapshots"],
                                           r["case"], r["side"] != "this")):  # fmt: skip
        same_case = (row["case"], row["backends"], row["snapshots"], row["block_tokens"])
        base, base_min = ours.get(same_case), ours_min.get(same_case)
        row["cpu_p50_vs_this"] = row["cpu_p50_us"] / base if base else None
        row["cpu_p50_min_vs_this"] = row["cpu_p50_min_us"] / base_min if base_min else None
        ratio = "" if base is None else f"{row['cpu_p50_vs_this']:.2f}x"
        ratio_min = "" if base_min is None else f"{row['cpu_p50_min_vs_this']:.2f}x"
        print(
            f"{row['case']:<24}{row['side']:<10}{row['block_tokens']:>6}{row['backends']:>9}"
            f"{row['snapshots']:>10}{row['p50_us']:>9.1f}{row['p99_us']:>9.1f}"
            f"{row['cpu_p50_us']:>9.1f}{row['cpu_p99_us']:>9.1f}{ratio:>17}"
            f"{row['cpu_p50_min_us']:>9.1f}{ratio_min:>13}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "bench_routing_sides.json"
    meta = {"sides": {name: str(src) for name, src in sides}, "rounds": args.rounds,
            "iterations": args.iterations, "load_average": os.getloadavg()}  # fmt: skip
    target.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {target}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=3_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--backends", type=int, nargs="+", default=[BACKENDS, 1_000])
    parser.add_argument("--block-tokens", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--policies", nargs="+", default=list(ALL_POLICIES))
    parser.add_argument("--out", type=Path, default=Path("loadtests/results"))
    parser.add_argument("--src", action="append", default=[], metavar="NAME=DIR",
                        help="another checkout's routing/ as a side of the same run")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="with --src: rounds of all sides")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cold-mb", type=int, default=0,
                        help="stream through this much memory between decisions (cold caches)")  # fmt: skip
    parser.add_argument("--idle-ms", type=float, default=0.0,
                        help="sleep this long between decisions (a c=1 gateway's idle gaps)")  # fmt: skip
    parser.add_argument("--advance-ms", type=float, default=0.0,
                        help="move the decisions' clock this much per decision (0: one time)")  # fmt: skip
    parser.add_argument("--scalar-max", type=int, default=None,
                        help="predicted_ttft's scalar path up to this many backends (0: never)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.src:
        same = ["--iterations", str(args.iterations), "--seed", str(args.seed)]
        same += ["--backends", *map(str, args.backends), "--policies", *args.policies]
        same += ["--cold-mb", str(args.cold_mb), "--idle-ms", str(args.idle_ms)]
        same += ["--advance-ms", str(args.advance_ms)]
        if args.scalar_max is not None:
            same += ["--scalar-max", str(args.scalar_max)]
        return _compare(args, [*same, "--block-tokens", *map(str, args.block_tokens)])
    rows = _rows(args)
    if args.child:
        print(json.dumps(rows))
        return 0
    baseline = {
        (r["block_tokens"], r["backends"], r["snapshots"]): r["p50_us"]
        for r in rows
        if r["case"] == "round_robin"
    }
    head = f"{'case':<24}{'block':>6}{'backends':>9}{'snapshots':>10}{'p50 us':>9}{'p99 us':>9}"
    print(head + f"{'p50/rr':>8}{'cpu p50':>9}{'cpu p99':>9}{'cpu p99/p50':>13}")
    for row in rows:
        base = baseline.get((row["block_tokens"], row["backends"], row["snapshots"]))
        row["p50_vs_round_robin"] = row["p50_us"] / base if base else None
        ratio = "" if base is None else f"{row['p50_vs_round_robin']:.2f}"
        print(
            f"{row['case']:<24}{row['block_tokens']:>6}{row['backends']:>9}{row['snapshots']:>10}"
            f"{row['p50_us']:>9.1f}{row['p99_us']:>9.1f}{ratio:>8}"
            f"{row['cpu_p50_us']:>9.1f}{row['cpu_p99_us']:>9.1f}"
            f"{row['cpu_p99_us'] / row['cpu_p50_us']:>13.2f}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "bench_routing.json"
    meta = {
        "backends": args.backends,
        "prompt_tokens_approx": 4_000,
        "iterations": args.iterations,
        "python": sys.version.split()[0],
    }
    target.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
