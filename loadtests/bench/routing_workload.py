"""The routing benchmark's workload (``loadtests/bench_routing.py``): a seeded fleet of three
regions (every tenth backend serverless, every fifth without engine metrics), prompt text and
chat bodies."""

from __future__ import annotations

import random
from typing import Any

from routing.types import BackendKind, BackendSpec, BackendState, FleetSnapshot

BACKENDS = 100
REGIONS = ("us-east", "eu-west", "ap-south")
REGION_RTT_MS = {"us-east": 2.0, "eu-west": 80.0, "ap-south": 190.0}
SYSTEM_PROMPTS = 20
NOW = 1_000.0


def seeded_fleet(rng: random.Random, size: int = BACKENDS) -> FleetSnapshot:
    backends: dict[str, BackendState] = {}
    for i in range(size):
        serverless = i % 10 == 9
        spec = BackendSpec(
            name=f"b{i:04d}",
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


def prompt_text(rng: random.Random, chars: int) -> str:
    words = ("alpha", "beta", "gamma", "delta", "tensor", "cache", "route", "token", "gpu")
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(words)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def chat_body(system: str, user: str) -> dict[str, Any]:
    return {
        "model": "llama-3-8b",
        "max_tokens": 256,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    }
