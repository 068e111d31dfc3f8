"""Validated parameters of one emulated backend: engine timing, faults, distance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from routing.types import BackendKind


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EngineParams(_Frozen):
    """Timing of a serving engine. Defaults approximate a 70B model on one 8-GPU node."""

    max_num_seqs: int = Field(
        default=256, ge=1, description="running sequences at most (batch slots)"
    )
    max_num_batched_tokens: int = Field(
        default=2048, ge=1, description="token budget of one engine step (chunked prefill)"
    )
    prefill_tokens_per_s: float = Field(default=10_000.0, gt=0)
    decode_base_ms: float = Field(
        default=19.5, ge=0, description="cost of a decode step, batch of 0"
    )
    decode_per_seq_ms: float = Field(
        default=0.5, ge=0, description="added step cost per decoding seq"
    )
    first_token_overhead_ms: float = Field(
        default=10.0, ge=0, description="per-request fixed cost (tokenize, schedule) before prefill"
    )
    block_tokens: int = Field(default=16, ge=1, description="prefix-cache block size in tokens")
    kv_cache_blocks: int = Field(
        default=65_536, ge=1, description="KV capacity in blocks (LRU bound)"
    )
    cold_start_ms: float = Field(
        default=0.0, ge=0, description="serverless: wake-up time when cold"
    )
    idle_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="serverless: scale to zero after this idle time; None = never",
    )
    default_output_tokens: int = Field(
        default=16, ge=1, description="output length without max_tokens"
    )
    max_model_len: int = Field(default=32_768, ge=1)
    tokenizer: str | None = Field(
        default=None,
        description="a tokenizer.json: prompt length and KV blocks in its tokens, as a real "
        "engine counts them (needs the 'tokenizers' package); None = UTF-8 bytes / 4",
    )


class FaultConfig(_Frozen):
    """Misbehaviour on demand. Probabilities are per request, drawn from the seeded RNG."""

    error_rate: float = Field(default=0.0, ge=0, le=1, description="share answered 500")
    rate_limit_rate: float = Field(default=0.0, ge=0, le=1, description="share answered 429")
    unavailable_rate: float = Field(default=0.0, ge=0, le=1, description="share answered 503")
    retry_after_s: float = Field(default=1.0, ge=0, description="Retry-After of 429/503")
    stall_rate: float = Field(
        default=1.0, ge=0, le=1, description="share stalled (when stall_ms > 0)"
    )
    stall_ms: float = Field(default=0.0, ge=0, description="extra wait before the first token")
    die_rate: float = Field(
        default=1.0, ge=0, le=1, description="share killed (when die_after_tokens)"
    )
    die_after_tokens: int | None = Field(default=None, ge=0, description="close mid-stream after N")
    drip_ms: float = Field(default=0.0, ge=0, description="extra inter-token latency (slow drip)")
    refuse_connections: bool = Field(default=False, description="reset every non-admin connection")
    unserved_paths: tuple[str, ...] = Field(
        default=(),
        description="API paths (e.g. /v1/embeddings) answered unserved_status, as by a server "
        "built without them",
    )
    unserved_status: Literal[404, 501] = Field(
        default=501, description="the answer to an unserved path: 501 Not Implemented or 404"
    )


class EmulatedBackendConfig(_Frozen):
    name: str = Field(min_length=1)
    models: Sequence[str] = Field(default=("emulated-model",), min_length=1)
    region: str = "local"
    kind: BackendKind = BackendKind.DEDICATED
    engine: EngineParams = EngineParams()
    faults: FaultConfig = FaultConfig()
    rtt_ms: float = Field(default=0.0, ge=0, description="round trip added in user space")
    seed: int = 0

    @field_validator("models", mode="before")
    @classmethod
    def _one_model_or_many(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @field_validator("models", mode="after")
    @classmethod
    def _models_frozen(cls, value: Sequence[str]) -> tuple[str, ...]:
        return tuple(value)
