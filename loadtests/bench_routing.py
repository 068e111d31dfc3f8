"""Decision-cost micro-benchmark: profile building + prefix hashing + one routing decision.

100 backends in 3 regions (10 serverless, 80 with engine metrics), a prefix index warmed by
earlier traffic (shared system prompts on many backends), and a ~4,000-token chat prompt that
shares one of those system prompts. Every policy is timed in the same run, and the ratios are
against round-robin's cost for the same work, so the table survives a slower machine.

    .venv/bin/python -m loadtests.bench_routing [--iterations 3000] [--out loadtests/results]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from routing.policies import build_router
from routing.prefix import block_hashes, canonical_chat
from routing.profile import profile_from_chat
from routing.types import BackendKind, BackendSpec, BackendState, FleetSnapshot, Observation

BACKENDS = 100
REGIONS = ("us-east", "eu-west", "ap-south")
REGION_RTT_MS = {"us-east": 2.0, "eu-west": 80.0, "ap-south": 190.0}
SYSTEM_PROMPTS = 20
NOW = 1_000.0


def _fleet(rng: random.Random) -> FleetSnapshot:
    backends: dict[str, BackendState] = {}
    for i in range(BACKENDS):
        serverless = i % 10 == 9
        spec = BackendSpec(
            name=f"b{i:03d}",
            region=REGIONS[i % 3],
            kind=BackendKind.SERVERLESS if serverless else BackendKind.DEDICATED,
            models=frozenset({"llama-3-8b"}),
            cold_start_ms=8_000.0 if serverless else 0.0,
            idle_timeout_s=300.0 if serverless else None,
        )
        metrics = i % 5 != 4
        backends[spec.name] = BackendState(
            spec=spec,
            in_flight=rng.randint(0, 40),
            running=rng.randint(0, 256) if metrics else None,
            waiting=rng.randint(0, 30) if metrics else None,
            kv_cache_usage=rng.random() if metrics else None,
            rtt_ms=REGION_RTT_MS[spec.region] * rng.uniform(0.9, 1.2),
            last_traffic_at=NOW - rng.uniform(0, 600) if serverless else None,
            as_of=NOW - 0.5,
        )
    return FleetSnapshot(backends, gateway_region="us-east", region_rtt_ms=REGION_RTT_MS)


def _text(rng: random.Random, chars: int) -> str:
    words = ("alpha", "beta", "gamma", "delta", "tensor", "cache", "route", "token", "gpu")
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(words)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def _body(system: str, user: str) -> dict[str, Any]:
    return {
        "model": "llama-3-8b",
        "max_tokens": 256,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    }


def _warm(
    router: Any, fleet: FleetSnapshot, systems: list[str], rng: random.Random, block_tokens: int
) -> None:
    """Earlier traffic: 2,000 requests whose prefixes the index now remembers."""
    for i in range(2_000):
        body = _body(systems[i % len(systems)], _text(rng, 800))
        profile = profile_from_chat(body, "tenant-a", block_tokens=block_tokens)
        decision = router.decide(profile, fleet, NOW - 60 + i * 0.01)
        chosen = decision.chosen
        if chosen is not None:
            router.observe(Observation(chosen.backend, NOW - 60 + i * 0.01, ok=True))


def _time(run: Callable[[], Any], after: Callable[[Any], None], iterations: int) -> list[float]:
    samples: list[float] = []
    clock = time.perf_counter_ns
    for _ in range(iterations):
        start = clock()
        result = run()
        samples.append((clock() - start) / 1_000.0)
        after(result)
    return samples


def _percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


def _case(policy: str, block_tokens: int, iterations: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    fleet = _fleet(rng)
    systems = [_text(rng, 4_000) for _ in range(SYSTEM_PROMPTS)]
    params: Mapping[str, Any] = (
        {"block_tokens": block_tokens}
        if policy in {"predicted_ttft", "cache_aware", "llm_d"}
        else {}
    )
    router = build_router(policy, params, seed)
    _warm(router, fleet, systems, rng, block_tokens)
    body = _body(systems[3], _text(rng, 12_000))  # ~4,000 tokens in all

    def run() -> Any:
        profile = profile_from_chat(body, "tenant-a", block_tokens=block_tokens)
        return router.decide(profile, fleet, NOW)

    def after(decision: Any) -> None:
        if decision.chosen is not None:
            router.release(decision.chosen.backend)

    _time(run, after, 200)
    p50, p99 = _percentiles(_time(run, after, iterations))
    return {"p50_us": p50, "p99_us": p99}


def _hash_only(block_tokens: int, iterations: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    body = _body(_text(rng, 4_000), _text(rng, 12_000))
    messages = body["messages"]
    samples = _time(
        lambda: block_hashes(canonical_chat(messages), "t", block_tokens),
        lambda _: None,
        iterations,
    )
    p50, p99 = _percentiles(samples)
    return {"p50_us": p50, "p99_us": p99}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=3_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("loadtests/results"))
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for block_tokens in (16, 64):
        rows.append(
            {
                "case": "hashing only",
                "block_tokens": block_tokens,
                **_hash_only(block_tokens, args.iterations, args.seed),
            }
        )
        for policy in (
            "round_robin",
            "predicted_ttft",
            "least_loaded",
            "latency_ewma",
            "cache_aware",
            "llm_d",
        ):
            rows.append(
                {
                    "case": policy,
                    "block_tokens": block_tokens,
                    **_case(policy, block_tokens, args.iterations, args.seed),
                }
            )
    baseline = {r["block_tokens"]: r["p50_us"] for r in rows if r["case"] == "round_robin"}
    print(f"{'case':<16}{'block':>6}{'p50 us':>10}{'p99 us':>10}{'p50 / rr':>10}")
    for row in rows:
        row["p50_vs_round_robin"] = row["p50_us"] / baseline[row["block_tokens"]]
        print(
            f"{row['case']:<16}{row['block_tokens']:>6}{row['p50_us']:>10.1f}{row['p99_us']:>10.1f}{row['p50_vs_round_robin']:>10.2f}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "bench_routing.json"
    meta = {
        "backends": BACKENDS,
        "prompt_tokens_approx": 4_000,
        "iterations": args.iterations,
        "python": sys.version.split()[0],
    }
    target.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
