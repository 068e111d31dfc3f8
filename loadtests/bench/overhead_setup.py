"""The overhead benchmarks' shared set-up: one backend's schedule, the gateway in front of it,
the closed-loop workload and the environment of a gateway that runs another checkout.

Used by ``loadtests.bench_overhead`` (closed loop, direct against the gateway) and
``loadtests.bench_worker_premium`` (open loop, one worker against two), so both measure the same
thing; ``bench_peers``, ``bench_event_cpu`` and ``profile_c1`` take ``ENGINE`` from here too.
"""

from __future__ import annotations

import os
from typing import Any

MODEL = "overhead-model"
ENGINE = {
    "max_num_seqs": 4096,
    "max_num_batched_tokens": 10_000_000,
    "prefill_tokens_per_s": 1e12,
    "decode_base_ms": 5,
    "decode_per_seq_ms": 0,
    "first_token_overhead_ms": 20,
}

# --backend mock: the same schedule as ENGINE (first token after the overhead, then one per
# decode step) from loadtests/mock_backend.py, which costs a fraction of the emulator's CPU.
MOCK_TTFT_MS = float(ENGINE["first_token_overhead_ms"])
MOCK_ITL_MS = float(ENGINE["decode_base_ms"])


def overhead_workload(
    concurrency: int, requests: int, lengths: tuple[int, int] = (16, 16)
) -> dict[str, object]:
    """``requests`` streamed chats (64 prompt tokens, 16 out), ``concurrency`` at a time.
    ``lengths``: answers drawn from min..max tokens instead. One length for every request
    keeps a closed loop's users in phase (their streams end together, so their next heads
    come together); a range lets them drift apart."""
    low, high = lengths
    max_tokens: object = low if low == high else {"min": low, "max": high}
    return {
        "name": f"overhead-c{concurrency}",
        "seed": 7,
        "model": MODEL,
        "arrival": {"mode": "closed", "concurrency": concurrency},
        "limits": {"requests": requests},
        "request_timeout_s": 120,
        "mix": [{"kind": "chat", "user_tokens": 64, "max_tokens": max_tokens}],
    }


def one_backend_config(name: str, backend_url: str) -> dict[str, Any]:
    """A gateway in front of one local backend, with a connection for every stream of a run."""
    backend = {"name": name, "region": "local", "url": backend_url + "/v1", "models": [MODEL]}
    return {"backends": [{**backend, "max_connections": 4096}]}


def src_env(src: str) -> dict[str, str]:
    """The environment of a gateway that runs the code in the checkout ``src``."""
    return {**os.environ, "PYTHONPATH": src}
