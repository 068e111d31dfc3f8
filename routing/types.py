"""The seam between the gateway and the routing engine.

Everything here is a frozen value. Times are seconds on a monotonic clock that the caller
supplies (``now``); the routing engine never reads a clock itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class BackendKind(StrEnum):
    DEDICATED = "dedicated"
    SERVERLESS = "serverless"
    GATEWAY = "gateway"  # another Meridian, usually in another region


class LatencyClass(StrEnum):
    INTERACTIVE = "interactive"  # judged on time to first token
    LONG_FORM = "long_form"  # judged on end-to-end time (TTFT + ITL x output tokens)


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """What configuration says about a backend: what cannot be observed, or not cheaply."""

    name: str
    region: str
    kind: BackendKind
    models: frozenset[str]
    max_num_seqs: int = 256
    prefill_tokens_per_s: float = 10_000.0
    itl_ms: float = 20.0
    first_token_overhead_ms: float = 10.0
    cold_start_ms: float = 0.0
    idle_timeout_s: float | None = None  # serverless scale-to-zero; None = always warm
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class BackendState:
    """A backend's live signals as of ``as_of`` (monotonic seconds).

    Every field is optional evidence: the predictor falls back to the spec where a signal is
    missing, and widens its spread as ``as_of`` ages.
    """

    spec: BackendSpec
    healthy: bool = True
    ejected_until: float | None = None
    in_flight: int = 0  # requests this gateway tier has open to the backend
    running: int | None = None  # engine-reported running sequences
    waiting: int | None = None  # engine-reported queue depth
    kv_cache_usage: float | None = None  # 0..1
    rtt_ms: float | None = None  # measured gateway -> backend round trip
    last_traffic_at: float | None = None  # for the serverless warm/cold model
    as_of: float = 0.0


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """The in-memory view of the fleet a decision is taken on. Built off the request path."""

    backends: Mapping[str, BackendState]
    gateway_region: str | None = None
    # Estimated round trip (ms) from the gateway's region to each region.
    region_rtt_ms: Mapping[str, float] = field(default_factory=dict)
    taken_at: float = 0.0


@dataclass(frozen=True, slots=True)
class RequestProfile:
    """What routing needs to know about one request, and nothing more (no prompt text)."""

    model: str
    tenant: str = "default"
    origin: str | None = None  # client's region, if known
    prompt_tokens: int = 0
    prefix_hashes: tuple[int, ...] = ()
    max_tokens: int | None = None
    latency_class: LatencyClass = LatencyClass.INTERACTIVE
    deadline_s: float | None = None
    exclude: frozenset[str] = frozenset()  # backends a previous hop already passed through


@dataclass(frozen=True, slots=True)
class Candidate:
    """One eligible backend, in rank order, with its prediction broken into named terms."""

    backend: str
    score: float  # lower is better; the unit is the policy's (ms for predicted-TTFT)
    predicted_ttft_ms: float | None = None
    predicted_ttft_p90_ms: float | None = None
    terms_ms: Mapping[str, float] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Rejection:
    backend: str
    filter: str
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    policy: str
    ranked: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...] = ()

    @property
    def chosen(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None


@dataclass(frozen=True, slots=True)
class Observation:
    """What really happened to one routed request; fed back so routing can learn."""

    backend: str
    at: float
    ok: bool
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    output_tokens: int = 0
    ttft_ms: float | None = None
    itl_ms: float | None = None
    predicted_ttft_ms: float | None = None
    prefix_hashes: tuple[int, ...] = ()
    tenant: str = "default"
    error_kind: str | None = None


class Router(Protocol):
    """A routing policy. ``decide`` must be pure given its inputs and the router's own state."""

    name: str

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision: ...

    def observe(self, observation: Observation) -> None: ...
