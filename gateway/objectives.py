"""TTFT objectives: which one a request carries, how it did, and what routing said about it.

A request's objective (a p90 TTFT bound, used by the ``slo_cost`` policy) comes from, in
order: the ``X-Meridian-TTFT-Objective-Ms`` header when the operator allows it (bounded; out of
bounds is a 400), its tenant's class, the default class. Configuration::

    objectives:
      classes: {interactive: {ttft_ms: 500}, batch: {ttft_ms: 30000}}
      tenants: {acme: interactive, nightly: batch}
      default_class: interactive          # optional
      header: {allow: true, min_ms: 50, max_ms: 60000}

Metrics: ``meridian_objective_requests{class, outcome=met|missed}`` counts streamed requests by
whether their first token came within the objective (from arrival at the gateway);
``meridian_spend{tenant, model, backend}`` (``gateway.pricing``) what they cost.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Annotated

from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.errors import bad_request
from gateway.inbound import InboundRequest
from gateway.pricing import OTHER_TENANT, SpendMetrics
from gateway.stream import OpenedStream
from gateway.timing import TimingEntry
from routing.types import Decision, RequestProfile

OBJECTIVE_HEADER = "X-Meridian-TTFT-Objective-Ms"
HEADER_CLASS = "header"  # the class label of objectives set by the header


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ObjectiveClass(_Strict):
    ttft_ms: Annotated[float, Field(gt=0)] = Field(
        description="p90 time-to-first-token objective (ms) of requests in this class"
    )


class ObjectiveHeader(_Strict):
    allow: bool = Field(default=False, description=f"honour the {OBJECTIVE_HEADER} request header")
    min_ms: Annotated[float, Field(gt=0)] = Field(
        default=50.0, description="lowest objective it may ask"
    )
    max_ms: Annotated[float, Field(gt=0)] = Field(
        default=600_000.0, description="highest objective it may ask"
    )

    @model_validator(mode="after")
    def _ordered(self) -> ObjectiveHeader:
        if self.min_ms > self.max_ms:
            raise ValueError(f"min_ms ({self.min_ms:g}) is above max_ms ({self.max_ms:g})")
        return self


class ObjectivesConfig(_Strict):
    classes: dict[str, ObjectiveClass] = Field(
        default_factory=dict, description="objective classes by name"
    )
    tenants: dict[str, str] = Field(
        default_factory=dict, description="tenant (X-Meridian-Tenant) -> class name"
    )
    default_class: str | None = Field(default=None, description="class of tenants not listed")
    header: ObjectiveHeader = ObjectiveHeader()

    @model_validator(mode="after")
    def _known_classes(self) -> ObjectivesConfig:
        known = set(self.classes)
        named = {f"tenants.{t}": c for t, c in sorted(self.tenants.items())}
        if self.default_class is not None:
            named["default_class"] = self.default_class
        for key, name in named.items():
            if name not in known:
                choices = ", ".join(sorted(known)) or "none defined"
                raise ValueError(f"{key}: class {name!r} is not in 'classes' ({choices})")
        if HEADER_CLASS in known:
            raise ValueError(f"classes: {HEADER_CLASS!r} is reserved for the header's objectives")
        return self

    def force_header(self) -> ObjectivesConfig:
        """The same, honouring the header (``meridian explain --objective-ms`` is the operator)."""
        return self.model_copy(update={"header": self.header.model_copy(update={"allow": True})})

    def resolve(self, tenant: str, header: str | None) -> tuple[float | None, str | None]:
        """(objective ms, class) for a request; raises a 400 ``ApiError`` for a bad header."""
        if header is not None and self.header.allow:
            return _header_objective(header, self.header), HEADER_CLASS
        name = self.tenants.get(tenant, self.default_class)
        if name is None:
            return None, None
        return self.classes[name].ttft_ms, name


def _header_objective(raw: str, bounds: ObjectiveHeader) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (bounds.min_ms <= value <= bounds.max_ms):  # NaN fails too
        raise bad_request(
            f"{OBJECTIVE_HEADER} must be a number of milliseconds between "
            f"{bounds.min_ms:g} and {bounds.max_ms:g}",
            param=OBJECTIVE_HEADER,
            code="invalid_objective",
        )
    return value


def with_objective(
    profile: RequestProfile, config: ObjectivesConfig, header: str | None
) -> RequestProfile:
    objective, name = config.resolve(profile.tenant, header)
    if objective is None:
        return profile
    return replace(profile, ttft_objective_ms=objective, objective_class=name)


def apply(inbound: InboundRequest, config: ObjectivesConfig, header: str | None) -> InboundRequest:
    """``inbound`` with its objective (the door's hook, after parsing)."""
    profile = with_objective(inbound.profile, config, header)
    return inbound if profile is inbound.profile else replace(inbound, profile=profile)


def timing_entries(decision: Decision, profile: RequestProfile) -> list[TimingEntry]:
    """``objective`` (its ms and class, and why the chosen one won) and one ``slo.<backend>``
    per ranked candidate (its predicted p90 as ``dur``, its expected cost, met or missed)."""
    objective = profile.ttft_objective_ms
    chosen = decision.chosen
    if objective is None or chosen is None:
        return []
    entries = [TimingEntry("objective", objective, f"class={profile.objective_class} "
                           f"chosen={chosen.backend}: {chosen.reason}")]  # fmt: skip
    for candidate in decision.ranked:
        p90 = candidate.predicted_ttft_p90_ms
        verdict = "unknown" if p90 is None else ("meets" if p90 <= objective else "misses")
        cost = "-" if candidate.expected_cost is None else f"{candidate.expected_cost:.6g}"
        entries.append(TimingEntry(f"slo.{candidate.backend}", p90, f"cost={cost} {verdict}"))
    return entries


class ObjectiveMetrics:
    """Objective attainment per class and spend per tenant/model/backend, at a request's end."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.attainment = Counter(
            "meridian_objective_requests",
            "Streamed requests with a TTFT objective, by class and whether the first token "
            "came within it (met, missed).",
            ["class", "outcome"],
            registry=registry,
        )
        self.spend = SpendMetrics(registry)

    def finish(
        self, inbound: InboundRequest, opened: OpenedStream, config: ObjectivesConfig
    ) -> None:
        profile = inbound.profile
        stats = opened.stats
        objective = profile.ttft_objective_ms
        if objective is not None and inbound.stream and stats.first_token_at is not None:
            ttft_ms = (stats.first_token_at - inbound.received_at) * 1000.0
            met = "met" if ttft_ms <= objective else "missed"
            self.attainment.labels(profile.objective_class, met).inc()
        usage = opened.usage or {}
        prompt = usage.get("prompt_tokens")
        prompt_tokens = prompt if isinstance(prompt, int) else profile.prompt_tokens
        named = inbound.tenant in config.tenants or inbound.tenant == "default"
        tenant = inbound.tenant if named else OTHER_TENANT
        labels = (tenant, inbound.model, opened.route.backend)
        self.spend.record(
            opened.spec.price,
            labels,
            prompt_tokens,
            opened.cached_tokens() or 0,
            opened.output_tokens(),
        )
