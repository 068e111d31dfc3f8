"""TTFT objectives: which one a request carries, how it did, and what routing said about it.

A request's objective (a p90 TTFT bound, used by the ``slo_cost`` policy) comes from, in
order: the ``X-Meridian-TTFT-Objective-Ms`` header when the operator allows it (bounded; out of
bounds is a 400), its API key's class, its tenant's class, the default class. Configuration::

    objectives:
      classes: {interactive: {ttft_ms: 500}, batch: {ttft_ms: 30000}}
      tenants: {acme: interactive, nightly: batch}
      keys: {k3y1d000: batch}             # by key id (gateway/auth): before the tenant's
      default_class: interactive          # optional
      header: {allow: true, min_ms: 50, max_ms: 60000}
      early_rejection: {quantile: 0.9, grpc_deadline: true, header: {allow: true}}

Metrics: ``meridian_objective_requests{class, outcome=met|missed}`` counts streamed requests by
whether their first token came within the objective (from arrival at the gateway);
``meridian_spend{tenant, model, backend}`` (``gateway.pricing``) what they cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated

from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.early_rejection import (
    DEADLINE_HEADER,
    EarlyRejectionConfig,
    deadline_s,
    refuse_if_unmeetable,
)
from gateway.errors import ApiError
from gateway.header_bounds import HeaderBounds
from gateway.inbound import InboundRequest
from gateway.opened_stream import OpenedStream
from gateway.pricing import OTHER_TENANT, SpendMetrics
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
    reject_if_unmeetable: bool = Field(
        default=False,
        description="the objective is also a deadline: refuse at once (503) when no backend "
        "is predicted to meet it (gateway/early_rejection.py)",
    )


class ObjectivesConfig(_Strict):
    classes: dict[str, ObjectiveClass] = Field(
        default_factory=dict, description="objective classes by name"
    )
    tenants: dict[str, str] = Field(
        default_factory=dict, description="tenant (X-Meridian-Tenant) -> class name"
    )
    keys: dict[str, str] = Field(
        default_factory=dict,
        description="API key id (auth.keys[].id) -> class name; a key's class is used before "
        "its tenant's",
    )
    default_class: str | None = Field(default=None, description="class of tenants not listed")
    header: HeaderBounds = Field(
        default=HeaderBounds(), description=f"the {OBJECTIVE_HEADER} request header"
    )
    early_rejection: EarlyRejectionConfig = Field(
        default=EarlyRejectionConfig(),
        description="Refuse at once a request whose objective no backend can meet, instead of letting it miss.",
    )

    @model_validator(mode="after")
    def _known_classes(self) -> ObjectivesConfig:
        known = set(self.classes)
        named = {f"tenants.{t}": c for t, c in sorted(self.tenants.items())}
        named.update({f"keys.{k}": c for k, c in sorted(self.keys.items())})
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

    def resolve(
        self, tenant: str, header: str | None, key_id: str | None = None
    ) -> tuple[float | None, str | None]:
        """(objective ms, class) for a request; raises a 400 ``ApiError`` for a bad header."""
        if header is not None and self.header.allow:
            return self.header.milliseconds(
                header, OBJECTIVE_HEADER, "invalid_objective"
            ), HEADER_CLASS
        name = self.keys.get(key_id) if key_id is not None else None
        if name is None:
            name = self.tenants.get(tenant, self.default_class)
        if name is None:
            return None, None
        return self.classes[name].ttft_ms, name

    def class_deadline_s(self, name: str | None) -> float | None:
        """The class's objective as a deadline, when it says ``reject_if_unmeetable``."""
        found = None if name is None else self.classes.get(name)
        if found is None or not found.reject_if_unmeetable:
            return None
        return found.ttft_ms / 1000.0


def with_objective(
    profile: RequestProfile,
    config: ObjectivesConfig,
    header: str | None,
    deadline_header: str | None = None,
    grpc_timeout_s: float | None = None,
    key_id: str | None = None,
) -> RequestProfile:
    """``profile`` with its objective and first-token deadline (``deadline_s``)."""
    objective, name = config.resolve(profile.tenant, header, key_id)
    class_deadline = config.class_deadline_s(name)
    deadline = deadline_s(config.early_rejection, deadline_header, grpc_timeout_s, class_deadline)
    if objective is None and deadline is None:
        return profile
    return replace(profile, ttft_objective_ms=objective, objective_class=name, deadline_s=deadline)


def apply(
    inbound: InboundRequest,
    config: ObjectivesConfig,
    headers: Mapping[str, str] | None,
    grpc_timeout_s: float | None = None,
    key_id: str | None = None,
) -> InboundRequest:
    """``inbound`` with its objective and deadline (the door's hook, after parsing);
    ``key_id``: the API key the request came with (its class comes before its tenant's)."""
    headers = headers or {}
    profile = with_objective(
        inbound.profile,
        config,
        headers.get(OBJECTIVE_HEADER),
        headers.get(DEADLINE_HEADER),
        grpc_timeout_s,
        key_id,
    )
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
        self.rejected = Counter(
            "meridian_early_rejections",
            "Requests refused before any upstream work because no backend was predicted to "
            "produce the first token within their deadline, by objective class.",
            ["class"],
            registry=registry,
        )

    def refusal(
        self,
        decision: Decision,
        profile: RequestProfile,
        config: ObjectivesConfig,
        received_at: float,
    ) -> ApiError | None:
        """The relay's hook between deciding and relaying (``gateway.early_rejection``); the
        relay releases the decision's reservation when this refuses."""
        error = refuse_if_unmeetable(decision, profile, config.early_rejection, received_at)
        if error is not None:
            self.rejected.labels(profile.objective_class or "none").inc()
        return error

    def finish(
        self, inbound: InboundRequest, opened: OpenedStream, config: ObjectivesConfig
    ) -> None:
        profile = inbound.profile
        stats = opened.exchange.stats
        objective = profile.ttft_objective_ms
        if objective is not None and inbound.stream and stats.first_token_at is not None:
            ttft_ms = (stats.first_token_at - inbound.received_at) * 1000.0
            met = "met" if ttft_ms <= objective else "missed"
            self.attainment.labels(profile.objective_class, met).inc()
        usage = opened.exchange.usage or {}
        prompt = usage.get("prompt_tokens")
        prompt_tokens = prompt if isinstance(prompt, int) else profile.prompt_tokens
        named = inbound.tenant in config.tenants or inbound.tenant == "default"
        tenant = inbound.tenant if named else OTHER_TENANT
        labels = (tenant, inbound.model, opened.route.backend)
        self.spend.record(
            opened.spec.price,
            labels,
            prompt_tokens,
            opened.exchange.cached_tokens() or 0,
            opened.exchange.output_tokens(),
        )
