"""Scenario files: regions and round trips, gateways, backends, client populations, workloads,
timed events. Validated as a whole; an error names the file and the key path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.pricing import PriceConfig
from loadtests import rtt_matrix
from loadtests.emulator.config import EngineParams
from loadtests.validation import problems
from routing.types import BackendKind, LatencyClass


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Poisson(_Strict):
    kind: Literal["poisson"] = "poisson"


class Bursts(_Strict):
    """Poisson whose rate is ``burst_factor`` x the base for ``burst_s`` out of every
    ``period_s`` (and lowered in between, so the mean rate stays ``rate_rps``)."""

    kind: Literal["bursts"] = "bursts"
    period_s: float = Field(gt=0)
    burst_s: float = Field(gt=0)
    burst_factor: float = Field(default=5.0, ge=1)
    phase_s: float = Field(default=0.0, ge=0, description="offset of the first burst")

    @model_validator(mode="after")
    def _fits(self) -> Bursts:
        if self.burst_s >= self.period_s:
            raise ValueError("burst_s must be shorter than period_s")
        if self.burst_factor * self.burst_s > self.period_s:
            raise ValueError("burst_factor x burst_s must not exceed period_s (mean rate kept)")
        return self


Arrival = Annotated[Poisson | Bursts, Field(discriminator="kind")]


class ClientPopulation(_Strict):
    region: str
    rate_rps: float = Field(gt=0, description="mean request rate of this population")
    arrival: Arrival = Poisson()
    workloads: Sequence[str] | None = Field(default=None, description="None: every workload")


class Range(_Strict):
    """Uniform integer range [low, high]."""

    low: int = Field(ge=0)
    high: int = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _from_pair(cls, data: Any) -> Any:
        if isinstance(data, int):
            return {"low": data, "high": data}
        if isinstance(data, list | tuple) and len(data) == 2:
            return {"low": data[0], "high": data[1]}
        return data

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) < low ({self.low})")
        return self


class Workload(_Strict):
    """Chat requests: a tenant's shared system prompt, then a per-request question."""

    weight: float = Field(default=1.0, gt=0)
    tenants: int = Field(default=1, ge=1)
    tenant_skew: float = Field(default=0.0, ge=0, description="Zipf exponent over tenants")
    system_prompts: int = Field(default=1, ge=1, description="shared prompts per tenant")
    prompt_skew: float = Field(default=0.0, ge=0, description="Zipf exponent over prompts")
    prefix_tokens: Range = Range(low=1000, high=1000)
    question_tokens: Range = Range(low=50, high=300)
    output_tokens: Range = Range(low=50, high=300)
    latency_class: LatencyClass = LatencyClass.INTERACTIVE
    ttft_objective_ms: float | None = Field(
        default=None, gt=0, description="p90 TTFT objective of these requests (slo_cost)"
    )
    deadline_ms: float | None = Field(
        default=None, gt=0, description="first-token deadline (early rejection in '+reject' runs)"
    )


class ExtraLoad(_Strict):
    """Traffic that reaches the region's backends without passing through Meridian."""

    kind: Literal["extra_load"] = "extra_load"
    region: str
    start_s: float = Field(ge=0)
    end_s: float = Field(gt=0)
    rate_rps: float = Field(gt=0)
    prompt_tokens: Range = Range(low=2000, high=2000)
    output_tokens: Range = Range(low=200, high=200)


class Slowdown(_Strict):
    """Every engine of the region runs ``factor`` x slower (noisy neighbour, throttling)."""

    kind: Literal["slowdown"] = "slowdown"
    region: str
    start_s: float = Field(ge=0)
    end_s: float = Field(gt=0)
    factor: float = Field(gt=1)


class PathDelay(_Strict):
    """One backend's request path gets ``extra_ms`` slower round trip (a reroute, a stalled
    hop); its probes see it too only if ``probes_see`` (a health endpoint answered in front of
    the slow hop does not). ``probe_rtt_ms``: its probes measure this instead, whatever the
    path (an edge or load balancer answers them). ``end_s`` past the run's end: for good."""

    kind: Literal["path_delay"] = "path_delay"
    backend: str = Field(min_length=1, description="a backend name as the fleet expands it")
    start_s: float = Field(ge=0)
    end_s: float = Field(gt=0)
    extra_ms: float = Field(default=0.0, ge=0, description="added to requests' round trip")
    probes_see: bool = Field(default=True, description="probes pay extra_ms too")
    probe_rtt_ms: float | None = Field(
        default=None, ge=0, description="probes measure this round trip instead"
    )


TimedEvent = Annotated[ExtraLoad | Slowdown | PathDelay, Field(discriminator="kind")]


class Signals(_Strict):
    scrape_interval_s: float = Field(default=1.0, gt=0, description="engine metrics refresh")
    probe_interval_s: float = Field(default=5.0, gt=0, description="RTT probe refresh")
    probe_jitter_ms: float = Field(default=1.0, ge=0, description="noise of one RTT probe")
    snapshot_interval_s: float = Field(
        default=1.0, gt=0, description="how often a gateway rebuilds its fleet snapshot"
    )
    schedule_jitter: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="> 0: each backend is scraped and probed on its own schedule, as the "
        "gateway's signal loops run it (first within min(interval, 1 s), then every interval "
        "+- this fraction; the snapshot is rebuilt at each, as the hub's is on the next "
        "request); 0: all at once on the snapshot tick (loadtests/sim/signal_schedule.py)",
    )
    signals_after_s: float = Field(
        default=0.0,
        ge=0,
        description="no scrape and no probe before this time: a gateway that just started "
        "routes on configuration alone (a replay of a cold gateway's recording)",
    )
    engine_counters: bool = Field(
        default=False,
        description="gateways extrapolate other clients' arrivals (prefill tokens, requests) "
        "between scrapes from the engines' counters less their own (routing.arrivals), as "
        "the gateway does with signals.engine_metrics.others_arrivals; off by default: it "
        "pays in scenario 1 (TTFT p99) but not in scenario 2",
    )
    shared_prefix_delay_s: float | None = Field(
        default=None,
        ge=0,
        description="the gateways share their prefix indexes through the shared state "
        "(state.backend: redis): each decision's prompt blocks reach the other gateways' "
        "routers this long after it, plus half the round trip between their regions "
        "(loadtests/sim/shared_prefixes.py); None: each gateway knows only its own",
    )
    shared_in_flight_delay_s: float | None = Field(
        default=None,
        ge=0,
        description="the gateways share their in-flight counts through the shared state (any "
        "state.backend but a private memory one): each change of one gateway's open requests "
        "reaches the others this long after it, plus half the round trip between their "
        "regions, and their routers count the others' requests sent since the last scrape "
        "(loadtests/sim/shared_in_flight.py); None: each gateway knows only its own",
    )
    shared_learning_delay_s: float | None = Field(
        default=None,
        ge=0,
        description="the gateways of one region learn from each other's first tokens "
        "through the shared state (state.share_learning): each reaches the region's other "
        "routers this long after it (loadtests/sim/shared_samples.py); None: each gateway "
        "learns from its own traffic only",
    )


class BackendGroup(_Strict):
    name: str = Field(min_length=1)
    region: str
    kind: BackendKind = BackendKind.DEDICATED
    count: int = Field(default=1, ge=1)
    engine: EngineParams = EngineParams.model_validate({})
    price: PriceConfig | None = Field(default=None, description="as a gateway backend's price")


class Objective(_Strict):
    """The joint objective goodput counts against: a request is good when both hold."""

    ttft_ms: float = Field(default=500.0, gt=0, description="first token within this")
    itl_ms: float = Field(
        default=50.0, gt=0, description="...and tokens this far apart on average after it"
    )


class Scenario(_Strict):
    name: str = "scenario"
    description: str = ""
    seed: int = 0
    duration_s: float = Field(default=120.0, gt=0, description="arrivals stop here")
    model: str = "sim-model"
    regions: Sequence[str] = Field(min_length=1)
    rtt_ms: Mapping[str, Mapping[str, float]] = Field(default_factory=dict)
    intra_region_rtt_ms: float = Field(default=2.0, ge=0)
    gateways: Mapping[str, int] = Field(
        default_factory=dict, description="gateways per region (default 1 where clients are)"
    )
    signals: Signals = Signals()
    engine_defaults: Mapping[str, Any] = Field(default_factory=dict)
    backends: Sequence[BackendGroup] = Field(min_length=1)
    clients: Mapping[str, ClientPopulation] = Field(min_length=1)
    workloads: Mapping[str, Workload] = Field(min_length=1)
    events: Sequence[TimedEvent] = ()
    policy_params: Mapping[str, Mapping[str, Any]] = Field(default_factory=dict)
    objective: Objective = Objective()
    early_rejection_quantile: float = Field(
        default=0.9, ge=0.5, le=0.999, description="of '+reject' runs (routing.deadline)"
    )

    @model_validator(mode="before")
    @classmethod
    def _overlay_engine_defaults(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or not isinstance(data.get("backends"), list):
            return data
        base = data.get("engine_defaults") or {}
        if not isinstance(base, Mapping):
            return data
        groups = [
            {**entry, "engine": {**base, **(entry.get("engine") or {})}}
            if isinstance(entry, Mapping)
            else entry
            for entry in data["backends"]
        ]
        return {**data, "backends": groups}

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        known = set(self.regions)
        rtt_matrix.check(self.rtt_ms, known)
        self._check_regions(known)
        names = [group.name for group in self.backends]
        if len(set(names)) != len(names):
            raise ValueError("backends: group names must be unique")
        for key, population in self.clients.items():
            for workload in population.workloads or ():
                if workload not in self.workloads:
                    raise ValueError(f"clients.{key}.workloads: unknown workload {workload!r}")
        for i, event in enumerate(self.events):
            if event.end_s <= event.start_s:
                raise ValueError(f"events[{i}].end_s: must be after start_s")
        return self

    def _check_regions(self, known: set[str]) -> None:
        for i, group in enumerate(self.backends):
            if group.region not in known:
                raise ValueError(f"backends[{i}].region: unknown region {group.region!r}")
        for key, population in self.clients.items():
            if population.region not in known:
                raise ValueError(f"clients.{key}.region: unknown region {population.region!r}")
        for region, count in self.gateways.items():
            if region not in known or count < 1:
                raise ValueError(f"gateways.{region}: unknown region or count < 1")
        names = set(self.backend_names())
        for i, event in enumerate(self.events):
            if isinstance(event, PathDelay):
                if event.backend not in names:
                    raise ValueError(f"events[{i}].backend: unknown backend {event.backend!r}")
            elif event.region not in known:
                raise ValueError(f"events[{i}].region: unknown region {event.region!r}")

    def backend_names(self) -> list[str]:
        """Every backend's name as the fleet expands its groups (``name-k`` when count > 1)."""
        return [
            group.name if group.count == 1 else f"{group.name}-{k}"
            for group in self.backends
            for k in range(group.count)
        ]

    def rtt(self, a: str, b: str) -> float:
        """Round trip in ms between two regions (symmetric)."""
        if a == b:
            return self.intra_region_rtt_ms
        value = rtt_matrix.lookup(self.rtt_ms, a, b)
        return 0.0 if value is None else value

    def gateway_counts(self) -> dict[str, int]:
        """Gateways per region: as configured, else one in every region with clients."""
        counts = {population.region: 1 for population in self.clients.values()}
        counts.update(self.gateways)
        return counts


@dataclass(frozen=True, slots=True)
class ScenarioError:
    kind: str  # "unreadable" | "invalid"
    message: str

    def __str__(self) -> str:
        return self.message


def parse_scenario(raw: Any, source: str) -> Scenario | ScenarioError:
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        tags = ("poisson", "bursts", "extra_load", "slowdown", "path_delay")
        return ScenarioError("invalid", problems(exc, source, raw, tags))


def load_scenario(path: str | Path) -> Scenario | ScenarioError:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        return ScenarioError("unreadable", f"{path}: cannot read scenario file: {exc}")
    return parse_scenario(raw, str(path))
