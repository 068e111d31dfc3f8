"""Backend prices in the operator's config, and what served requests cost (spend metrics).

A backend's ``price`` (all optional, per million tokens, one currency for the whole file)::

    price: {prompt_per_mtok: 3.0, cached_prompt_per_mtok: 0.3, completion_per_mtok: 15.0}
    price: {hourly: 12.0}   # dedicated capacity: marginal cost grows with utilisation

How routing turns these into a request's expected cost (and the hourly marginal cost) is
``routing.cost``. Spend is counted per request from what it used (the usage the backend
reported, else the gateway's prompt estimate and the relayed output events) at the per-token
prices; hourly capacity is billed by the hour, not per request, so it adds nothing here.
"""

from __future__ import annotations

from typing import Annotated

from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

from gateway.metrics import LabelledChildren
from routing.price import Price

OTHER_TENANT = "other"  # spend of tenants the config does not name (bounded labels)


class PriceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_per_mtok: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="price of one million uncached prompt tokens"
    )
    cached_prompt_per_mtok: Annotated[float, Field(ge=0)] | None = Field(
        default=None, description="price of one million prompt tokens served from the prefix cache "
        "(unset: the uncached price)"
    )  # fmt: skip
    completion_per_mtok: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="price of one million completion (output) tokens"
    )
    hourly: Annotated[float, Field(ge=0)] | None = Field(
        default=None, description="dedicated capacity's price per hour; routing charges a request a "
        "marginal cost linear in the backend's utilisation (routing.cost)"
    )  # fmt: skip

    def price(self) -> Price:
        return Price(
            self.prompt_per_mtok, self.cached_prompt_per_mtok, self.completion_per_mtok, self.hourly
        )


class SpendMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.spend = Counter(
            "meridian_spend",
            "What served requests cost at the backends' per-token prices (operator's currency); "
            f"tenants the config does not name are '{OTHER_TENANT}'.",
            ["tenant", "model", "backend"],
            registry=registry,
        )
        # Named tenants or OTHER_TENANT, configured models and backends: bounded by the config.
        self.spend_of = LabelledChildren(self.spend)

    def record(
        self,
        price: Price | None,
        labels: tuple[str, str, str],
        prompt_tokens: int,
        cached_tokens: int,
        completion_tokens: int,
    ) -> float:
        """Count one request's spend; returns it (0 for an unpriced backend)."""
        if price is None:
            return 0.0
        cached = min(max(cached_tokens, 0), prompt_tokens)
        cost = price.tokens_cost(prompt_tokens - cached, cached, completion_tokens)
        self.spend_of[labels].inc(cost)
        return cost
