"""How much a model's tokenizer improves the prefill term: predicted vs true uncached prompt
tokens, bytes/4 against the tokenizer, over prompts of several kinds that share prefixes.

One command: ``python -m loadtests.bench_tokenizer``. The "engine" here counts with a BPE
tokenizer trained on the workload's own text families (nothing is downloaded), which stands in
for a model's tokenizer: truth is its token count and, for a prompt that follows another with
a shared prefix, the engine's cached tokens (the common token prefix, in whole blocks).
Meridian's prediction is what its profile says: prompt tokens minus the tokens of the prefix
blocks the previous prompt left cached. Reported: the error of that prediction in tokens and
in prefill milliseconds at the default 10,000 tokens/s, p50 and p99, per prompt kind and
overall, with and without the tokenizer, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from gateway.tokenizer import prompt_ids, retokenize
from loadtests.bench.stats import percentile
from loadtests.results_file import fmt, write_results
from routing.profile import profile_from_chat
from routing.types import RequestProfile

PREFILL_TOKENS_PER_S = 10_000.0
BLOCK = 16

_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "routers",
    "predict",
    "latency",
]
_CODE = [
    "def f(x):",
    "    return x * 2",
    "for i in range(10):",
    "if a != b: raise ValueError",
    "{}",
    "[]",
]
_CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自之着去"


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _code(rng: random.Random, n: int) -> str:
    return "\n".join(rng.choice(_CODE) + f"  # {rng.randint(0, 9999)}" for _ in range(n // 6))


def _numbers(rng: random.Random, n: int) -> str:
    return ", ".join(f"{rng.uniform(-1e4, 1e4):.3f}" for _ in range(n // 3))


def _cjk(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_CJK) for _ in range(n))


KINDS: dict[str, Callable[[random.Random, int], str]] = {
    "prose": _prose,
    "code": _code,
    "numbers": _numbers,
    "cjk": _cjk,
}


def train_tokenizer(rng: random.Random, path: Path) -> Tokenizer:
    corpus = [make(rng, 400) for make in KINDS.values() for _ in range(60)]
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=8000,
        special_tokens=["[UNK]"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    tokenizer.save(str(path))
    return Tokenizer.from_file(str(path))  # loaded as an operator's file would be


def _chat(system: str, user: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return {"model": "m", "messages": messages}


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading items two sequences share (token ids, or block hashes)."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


def measure(
    tokenizer: Tokenizer, rng: random.Random, pairs: int
) -> dict[str, dict[str, list[float]]]:
    """Per kind: the prediction errors (tokens) of each method."""
    errors: dict[str, dict[str, list[float]]] = {}
    for kind, make in KINDS.items():
        out = errors.setdefault(kind, {"bytes4": [], "tokenizer": []})
        for _ in range(pairs):
            system = make(rng, rng.randint(200, 1200))  # the shared part: a long system prompt
            first = _chat(system, make(rng, rng.randint(10, 200)))
            second = _chat(system, make(rng, rng.randint(10, 200)))
            ids_first, ids_second = prompt_ids(tokenizer, first), prompt_ids(tokenizer, second)
            cached_true = _common_prefix(ids_first, ids_second) // BLOCK * BLOCK
            uncached_true = len(ids_second) - cached_true
            for method in ("bytes4", "tokenizer"):
                p_first: RequestProfile = profile_from_chat(first, block_tokens=BLOCK)
                p_second: RequestProfile = profile_from_chat(second, block_tokens=BLOCK)
                if method == "tokenizer":
                    p_first, p_second = (
                        retokenize(p_first, ids_first),
                        retokenize(p_second, ids_second),
                    )
                cached = _common_prefix(p_first.prefix_hashes, p_second.prefix_hashes) * BLOCK
                predicted = max(0, p_second.prompt_tokens - cached)
                out[method].append(abs(predicted - uncached_true))
    return errors


async def against_emulator(
    tokenizer_path: Path, rng_seed: int, pairs: int
) -> dict[str, list[float]]:
    """Predicted vs measured TTFT through a gateway, without and with ``tokenizers:``, to one
    emulated engine that counts with the tokenizer (prefill 2,000 tokens/s, so the prefill term
    dominates). Each prompt pair warms a shared system prompt, then asks the second prompt."""
    import aiohttp
    import orjson

    from gateway.app import start_gateway
    from gateway.config import parse_config
    from loadtests.emulator.config import EmulatedBackendConfig, EngineParams
    from loadtests.emulator.server import start_emulated_backend

    engine = EngineParams(
        prefill_tokens_per_s=2_000.0, decode_base_ms=1.0, decode_per_seq_ms=0.0,
        first_token_overhead_ms=1.0, block_tokens=BLOCK, tokenizer=str(tokenizer_path),
    )  # fmt: skip
    emulator = await start_emulated_backend(
        EmulatedBackendConfig(name="e", models=("m",), engine=engine)
    )
    errors: dict[str, list[float]] = {}
    try:
        for method, tokenizers in (("bytes4", {}), ("tokenizer", {"m": str(tokenizer_path)})):
            capacity = {"prefill_tokens_per_s": 2_000.0, "first_token_overhead_ms": 1.0}
            config = parse_config(
                {
                    "backends": [
                        {"name": "e", "region": "r", "url": emulator.url + "/v1", "models": ["m"],
                         "capacity": capacity}
                    ],
                    "tokenizers": tokenizers,
                    "signals": {"probes": {"enabled": False}, "engine_metrics": {"enabled": False}},
                }
            )  # fmt: skip
            gateway = await start_gateway(config, "127.0.0.1", 0)
            rng = random.Random(rng_seed)  # the same prompts for both methods
            out = errors.setdefault(method, [])
            async with aiohttp.ClientSession() as session:
                await session.post(emulator.url + "/admin/reset")
                for kind in KINDS.values():
                    for _ in range(pairs):
                        system = kind(rng, rng.randint(200, 1200))
                        for user in (
                            kind(rng, rng.randint(10, 200)),
                            kind(rng, rng.randint(10, 200)),
                        ):
                            body = {**_chat(system, user), "max_tokens": 1, "stream": True}
                            async with session.post(
                                gateway.url + "/v1/chat/completions", json=body
                            ) as r:
                                route = r.headers["X-Meridian-Route"]
                                raw = await r.read()
                        predicted = float(route.rsplit("predicted_ttft_ms=", 1)[1])
                        line = next(
                            x for x in raw.split(b"\n") if x.startswith(b": meridian-timing ")
                        )
                        actual = orjson.loads(line.split(b" ", 2)[2])["ttft_ms"]
                        out.append(abs(predicted - actual))
            await gateway.close()
    finally:
        await emulator.close()
    return errors


def _pct(values: Sequence[float], pct: float) -> float:
    return percentile(values, pct) or 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=200, help="prompt pairs per kind")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--emulator-pairs", type=int, default=15, help="pairs per kind, end to end")
    parser.add_argument("--out", default="loadtests/results")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer.json"
        tokenizer = train_tokenizer(rng, path)
        errors = measure(tokenizer, rng, args.pairs)
        emulated = asyncio.run(against_emulator(path, args.seed, args.emulator_pairs))
    errors["all"] = {m: [e for k in KINDS for e in errors[k][m]] for m in ("bytes4", "tokenizer")}
    ms = 1000.0 / PREFILL_TOKENS_PER_S
    rows: dict[str, Any] = {}
    print(
        f"{'kind':<8} {'bytes/4 p50':>11} {'p99':>7} {'tokenizer p50':>13} {'p99':>7} {'p99 ratio':>9}   (prefill ms error)"
    )
    for kind, by_method in errors.items():
        row: dict[str, Any] = {
            m: {
                "p50_tokens": _pct(v, 50),
                "p99_tokens": _pct(v, 99),
                "p50_ms": _pct(v, 50) * ms,
                "p99_ms": _pct(v, 99) * ms,
            }
            for m, v in by_method.items()
        }
        base, tok = row["bytes4"], row["tokenizer"]
        ratio = tok["p99_ms"] / base["p99_ms"] if base["p99_ms"] else None
        row["p99_ratio_tokenizer_over_bytes4"] = ratio
        rows[kind] = row
        print(
            f"{kind:<8} {fmt(base['p50_ms']):>11} {fmt(base['p99_ms']):>7} "
            f"{fmt(tok['p50_ms']):>13} {fmt(tok['p99_ms']):>7} {fmt(ratio, 3):>9}"
        )
    print(
        f"\nthrough a gateway to an emulator counting real tokens ({args.emulator_pairs} pairs per kind):"
    )
    print(f"{'method':<10} {'|predicted - actual| TTFT p50 ms':>32} {'p99 ms':>8}")
    emulator_rows = {}
    for method, values in emulated.items():
        emulator_rows[method] = {
            "p50_ms": _pct(values, 50),
            "p99_ms": _pct(values, 99),
            "n": len(values),
        }
        print(f"{method:<10} {fmt(_pct(values, 50)):>32} {fmt(_pct(values, 99)):>8}")
    base, tok = emulator_rows["bytes4"], emulator_rows["tokenizer"]
    ratios = {k: tok[k] / base[k] if base[k] else None for k in ("p50_ms", "p99_ms")}
    print(f"{'ratio':<10} {fmt(ratios['p50_ms'], 3):>32} {fmt(ratios['p99_ms'], 3):>8}")
    payload = {
        "against_emulator": {"rows": emulator_rows, "ratio_tokenizer_over_bytes4": ratios},
        "benchmark": "tokenizer",
        "pairs_per_kind": args.pairs,
        "block_tokens": BLOCK,
        "prefill_tokens_per_s": PREFILL_TOKENS_PER_S,
        "tokenizer": "BPE, vocab 8000, trained on the workload's text families",
        "rows": rows,
    }
    write_results(args.out, "tokenizer", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
