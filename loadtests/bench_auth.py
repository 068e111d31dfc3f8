"""What authentication adds to a request: auth on (API keys) vs off, side by side in one run.

    python -m loadtests.bench_auth [--calls N] [--requests N] [--rounds R] [--out DIR]

Two measurements, each alternating on and off in rounds so machine noise hits both alike:

- **door**: the work the HTTP door does per request for auth and quotas —
  ``Authenticator.authenticate`` on the ``Authorization`` header, ``authorize`` for the model,
  ``Quotas.admit`` for the key and its tenant (requests and tokens) — timed per call in-process
  (batches of 100 calls per clock read, so the timer itself is not measured); four sides:
  auth off, auth only, auth + quotas on the replica's own buckets, auth + quotas shared
  between replicas (local allowances refilled in the background).
- **end to end**: sequential non-streaming requests (c=1) through two ``meridian serve``
  processes in front of one emulator, one with ``auth.mode: keys`` and one with ``off``;
  latency p50/p99 per side and the difference. Noisier than the door numbers by far: the added
  cost is microseconds inside milliseconds.

Target (issue 13): auth and quota checks add at most 50 µs p50. The end-to-end side runs auth
only (its gateways have no quotas).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import aiohttp

from gateway.auth.authenticator import Authenticator, KeyRing, authorize
from gateway.auth.config import AuthConfig, KeyEntry
from gateway.auth.keys import StoredKey, digest, new_key
from gateway.quota.allowance import AllowanceLink
from gateway.quota.config import QuotaConfig, QuotaLimits
from gateway.quota.limiter import Quotas
from gateway.quota.refill import Refiller
from gateway.state.config import StateConfig
from gateway.state.memory import MemoryStore
from gateway.state.sync import SharedStateSync
from loadtests.processes import emulated_backend, gateway
from loadtests.results_file import fmt, write_results

MODEL = "auth-bench-model"
BATCH = 100
ENGINE = {"prefill_tokens_per_s": 1e12, "decode_base_ms": 1, "first_token_overhead_ms": 1}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _door_side(
    authenticator: Authenticator, quotas: Quotas, header: str, calls: int
) -> list[float]:
    """Per-call microseconds, one sample per batch of BATCH calls; between batches the loop
    runs (a shared quota's refiller claims there, as it would between requests)."""
    samples = []
    for _ in range(calls // BATCH):
        started = time.perf_counter_ns()
        for _ in range(BATCH):
            principal = authenticator.authenticate(header, None)
            authorize(principal, MODEL)
            quotas.admit(principal.key_id, principal.tenant, 64)
        samples.append((time.perf_counter_ns() - started) / BATCH / 1000.0)
        await asyncio.sleep(0)
    return samples


async def door(calls: int, rounds: int) -> dict[str, Any]:
    """Four sides: auth off; auth on without quotas; auth + quotas on this replica's own
    buckets; auth + quotas shared through a state store (allowances, refilled in the
    background from a store in this process: the request path is the same as with Redis)."""
    key, key_id = new_key()
    entries = [KeyEntry(id=key_id, sha256=digest(key), tenant="acme", models=[MODEL])]
    for _ in range(999):  # a ring of a thousand keys: lookup is by id
        other, other_id = new_key()
        entries.append(KeyEntry(id=other_id, sha256=digest(other), tenant="t"))
    config = AuthConfig(mode="keys", keys=entries)
    ring = KeyRing(StoredKey.from_entry(e) for e in entries)
    on = Authenticator(config, ring, enabled=True)
    off = Authenticator(AuthConfig(mode="off"), KeyRing(), enabled=False)
    # Limits no run reaches: every check passes, and costs what it costs.
    generous = QuotaLimits(rps=1e9, burst=1e9, tokens_per_minute=10**15)
    quota_config = QuotaConfig(per_key=generous, per_tenant=generous)
    link = AllowanceLink(quota_config.allowance)
    sync = SharedStateSync(MemoryStore(), StateConfig(), replica_id="bench")
    refiller = asyncio.create_task(Refiller(link, sync).run())
    sides = {
        "off": (off, Quotas(QuotaConfig())),
        "auth": (on, Quotas(QuotaConfig())),
        "auth+quotas": (on, Quotas(quota_config)),
        "auth+shared": (on, Quotas(quota_config, link=link)),
    }
    header = f"Bearer {key}"
    samples: dict[str, list[float]] = {side: [] for side in sides}
    try:
        for _ in range(rounds):
            for side, (authenticator, quotas) in sides.items():
                samples[side] += await _door_side(authenticator, quotas, header, calls // rounds)
    finally:
        refiller.cancel()
    return {side: _stats(values) for side, values in samples.items()}


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "p50": statistics.median(values),
        "p99": _quantile(values, 0.99),
        "samples": len(values),
    }


def _gateway_config(url: str, auth: dict[str, Any]) -> dict[str, Any]:
    return {
        "backends": [{"name": "b1", "region": "local", "url": url + "/v1", "models": [MODEL]}],
        "auth": auth,
        "signals": {"probes": {"interval_s": 60}},
    }


async def _latencies(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], requests: int
) -> list[float]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    out = []
    for _ in range(requests):
        started = time.perf_counter()
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status} from {url}")
        out.append((time.perf_counter() - started) * 1e6)
    return out


async def end_to_end(requests: int, rounds: int) -> dict[str, Any]:
    key, key_id = new_key()
    entry = {"id": key_id, "sha256": digest(key), "tenant": "acme", "models": [MODEL]}
    async with emulated_backend("b1", MODEL, ENGINE) as (backend_url, _):
        async with (
            gateway(_gateway_config(backend_url, {"mode": "off"})) as (off_url, _),
            gateway(_gateway_config(backend_url, {"mode": "keys", "keys": [entry]})) as (on_url, _),
        ):
            samples: dict[str, list[float]] = {"on": [], "off": []}
            async with aiohttp.ClientSession() as session:
                await _latencies(session, off_url, {}, 20)  # warm both pools
                await _latencies(session, on_url, {"Authorization": f"Bearer {key}"}, 20)
                for _ in range(rounds):
                    samples["off"] += await _latencies(session, off_url, {}, requests // rounds)
                    samples["on"] += await _latencies(
                        session, on_url, {"Authorization": f"Bearer {key}"}, requests // rounds
                    )
    return {side: _stats(values) for side, values in samples.items()}


def _table(name: str, result: dict[str, Any]) -> str:
    off = result["off"]
    rows = [f"{name:<14} {'p50 µs':>10} {'p99 µs':>10} {'+p50 vs off':>12}"]
    for side, stats in result.items():
        added = stats["p50"] - off["p50"]
        rows.append(f"{side:<14} {fmt(stats['p50']):>10} {fmt(stats['p99']):>10} {fmt(added):>12}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args()
    door_result = asyncio.run(door(args.calls, args.rounds))
    print(_table("door", door_result))
    e2e = asyncio.run(end_to_end(args.requests, args.rounds))
    print(_table("end to end", e2e))
    for side in ("auth+quotas", "auth+shared"):
        added = door_result[side]["p50"] - door_result["off"]["p50"]
        verdict = "within" if added <= 50.0 else "OVER"
        print(f"{side} adds {added:.2f} µs p50 at the door: {verdict} the 50 µs budget")
    write_results(args.out, "bench_auth", {"door_us": door_result, "end_to_end_us": e2e})


if __name__ == "__main__":
    main()
