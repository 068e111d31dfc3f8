"""``quotas:`` in the operator file."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class QuotaLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rps: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="Requests per second (sustained)."
    )
    burst: Annotated[float, Field(ge=1)] | None = Field(
        default=None, description="Requests that may come at once; default: max(1, rps)."
    )
    tokens_per_minute: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="Prompt tokens (charged on arrival) plus completion tokens (charged when "
        "the response ends) per minute; a minute's worth may come at once.",
    )


class QuotaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    per_key: QuotaLimits | None = Field(default=None, description="Every API key's quota.")
    per_tenant: QuotaLimits | None = Field(default=None, description="Every tenant's quota.")
    tenants: dict[str, QuotaLimits] = Field(
        default_factory=dict, description="Per-tenant overrides of per_tenant."
    )
    allowance: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.1,
        description="With shared state (state.backend redis, redis-cluster or host): the "
        "share of a bucket's burst each replica claims from the store at a time and may "
        "overdraw by. The replicas together admit at most limit x (1 + replicas x allowance); "
        "smaller: tighter, but more store round trips (rate / (allowance x burst) a second "
        "per busy bucket and replica).",
    )
    max_tracked: Annotated[int, Field(ge=16)] = Field(
        default=100_000,
        description="Buckets kept at most; the least recently used full ones go first.",
    )
