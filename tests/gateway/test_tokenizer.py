"""A model's own tokenizer.json: real prompt lengths and token-aligned prefix blocks; config
mistakes name the key. The tokenizer here is trained by the test (nothing is downloaded)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from gateway.config import ConfigError, parse_config
from gateway.inbound import Endpoint, parse_inbound
from gateway.model_names import ModelNames
from tests.gateway.support import MODEL, EmulatorFactory, GatewayFactory

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "def route(request): return min(backends, key=predicted_ttft)",
    "prefill decode queue cache block token gateway region latency",
] * 50


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]"], show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def config_data(url: str, tokenizers: dict[str, str]) -> dict[str, Any]:
    return {
        "backends": [{"name": "b1", "region": "local", "url": url + "/v1", "models": [MODEL]}],
        "tokenizers": tokenizers,
    }


def profile_of(names: ModelNames, text: str) -> Any:
    body = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": text}]})
    inbound = parse_inbound(
        Endpoint.CHAT,
        body,
        request_id="r",
        tenant="default",
        origin=None,
        known_models=names,
        received_at=time.perf_counter(),
    )
    return inbound.profile


def test_prompt_length_and_blocks_come_from_the_tokenizer(tokenizer_path: Path) -> None:
    config = parse_config(config_data("http://127.0.0.1:9", {MODEL: str(tokenizer_path)}))
    with_tokenizer = ModelNames.from_config(config)
    without = ModelNames.from_config(parse_config(config_data("http://127.0.0.1:9", {})))
    text = "the quick brown fox jumps over the lazy dog " * 12
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    from routing.prefix import canonical_chat

    canonical = canonical_chat([{"role": "user", "content": text}])
    real = len(tokenizer.encode(canonical.decode(), add_special_tokens=False).ids)
    exact, estimated = profile_of(with_tokenizer, text), profile_of(without, text)
    assert exact.prompt_tokens == real
    assert estimated.prompt_tokens == -(-len(canonical) // 4)
    assert (
        exact.prompt_tokens != estimated.prompt_tokens
    )  # the trained vocab is not 4 bytes a token
    assert len(exact.prefix_hashes) == real // exact.block_tokens
    # a shared prefix shares its full token blocks, and only those
    longer = profile_of(with_tokenizer, text + "prefill decode queue cache " * 8)
    shared = 0
    for a, b in zip(exact.prefix_hashes, longer.prefix_hashes, strict=False):
        if a != b:
            break
        shared += 1
    assert shared >= len(exact.prefix_hashes) - 1


async def test_a_gateway_with_a_tokenizer_serves(
    emulator: EmulatorFactory, gateway: GatewayFactory, tokenizer_path: Path
) -> None:
    backend = await emulator("b1")
    running = await gateway(parse_config(config_data(backend.url, {MODEL: str(tokenizer_path)})))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + "/v1/chat/completions", json=body) as response:
            assert response.status == 200


@pytest.mark.parametrize(
    ("tokenizers", "message"),
    [
        ({MODEL: "/nonexistent/tokenizer.json"}, r"tokenizers: no such file for test-model"),
        ({"other-model": "/x.json"}, r"tokenizers: no backend serves other-model"),
    ],
)
def test_tokenizer_mistakes_name_the_key(tokenizers: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(config_data("http://127.0.0.1:9", tokenizers), "gw.yaml")


async def test_the_emulator_counts_with_its_tokenizer(tokenizer_path: Path) -> None:
    from loadtests.emulator.config import EmulatedBackendConfig, EngineParams
    from loadtests.emulator.server import start_emulated_backend
    from routing.prefix import canonical_chat

    engine = EngineParams(prefill_tokens_per_s=1e6, tokenizer=str(tokenizer_path))
    emulator = await start_emulated_backend(
        EmulatedBackendConfig(name="e", models=(MODEL,), engine=engine)
    )
    messages = [{"role": "user", "content": "the quick brown fox " * 20}]
    try:
        async with aiohttp.ClientSession() as session:
            body = {"model": MODEL, "messages": messages, "max_tokens": 1}
            async with session.post(emulator.url + "/v1/chat/completions", json=body) as response:
                usage = (await response.json())["usage"]
    finally:
        await emulator.close()
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    real = tokenizer.encode(canonical_chat(messages).decode(), add_special_tokens=False).ids
    assert usage["prompt_tokens"] == len(real) != -(-len(canonical_chat(messages)) // 4)
