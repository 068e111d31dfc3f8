"""Placement policy: where a tenant's or an origin's requests may go, and where they prefer to.

``allowed_regions`` is data residency — a hard filter in routing (EU clients only to EU
regions). ``region_penalty_ms`` is a preference — milliseconds added to a region's routing score,
never to its predicted TTFT, so a preferred region wins near-ties without hiding real latency.
A request matches at most one tenant rule and one origin rule; both apply: allowed regions
intersect, penalties add up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class PlacementRule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed_regions: Annotated[list[str], Field(min_length=1)] | None = Field(
        default=None,
        description="The only regions its requests may be served from (data residency, a hard filter).",
    )
    region_penalty_ms: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict,
        description="Per region, ms added to predicted TTFT (a preference, not a rule).",
    )


class PlacementConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tenants: dict[str, PlacementRule] = Field(
        default_factory=dict, description="Rules per tenant (X-Meridian-Tenant -> rule)."
    )
    origins: dict[str, PlacementRule] = Field(
        default_factory=dict, description="Rules per client origin (region name -> rule)."
    )

    def regions_named(self) -> set[str]:
        named: set[str] = set()
        for rule in (*self.tenants.values(), *self.origins.values()):
            named.update(rule.allowed_regions or ())
            named.update(rule.region_penalty_ms)
        return named


@dataclass(frozen=True, slots=True)
class Placement:
    allowed_regions: frozenset[str] | None
    region_penalty_ms: Mapping[str, float]


UNRESTRICTED = Placement(None, {})


def resolve(config: PlacementConfig, tenant: str, origin: str | None) -> Placement:
    rules = [r for r in (config.tenants.get(tenant), config.origins.get(origin or "")) if r]
    if not rules:
        return UNRESTRICTED
    allowed: frozenset[str] | None = None
    penalties: dict[str, float] = {}
    for rule in rules:
        if rule.allowed_regions is not None:
            regions = frozenset(rule.allowed_regions)
            allowed = regions if allowed is None else allowed & regions
        for region, penalty in rule.region_penalty_ms.items():
            penalties[region] = penalties.get(region, 0.0) + penalty
    return Placement(allowed, penalties)
