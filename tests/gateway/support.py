"""Shared helpers for gateway tests: fast emulated engines and configs that point at them."""

from __future__ import annotations

from typing import Any

from gateway.config import GatewayConfig, parse_config
from loadtests.emulator.config import EngineParams
from tests.servers import EmulatorFactory as EmulatorFactory  # re-exported for annotations
from tests.servers import GatewayFactory as GatewayFactory

MODEL = "test-model"
FAST_ENGINE = EngineParams(
    decode_base_ms=2.0,
    decode_per_seq_ms=0.0,
    first_token_overhead_ms=1.0,
    prefill_tokens_per_s=1_000_000.0,
    default_output_tokens=8,
)


def config_for(urls: dict[str, str], **overrides: Any) -> GatewayConfig:
    backends = [
        {"name": name, "region": "local", "url": url + "/v1", "models": [MODEL]}
        for name, url in urls.items()
    ]
    data: dict[str, Any] = {"backends": backends, "timeouts": {"first_token_s": 5.0}}
    data.update(overrides)
    return parse_config(data, "<test>")
