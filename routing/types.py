"""The seam between the gateway and the routing engine.

Everything here is a frozen value. Times are seconds on a monotonic clock that the caller
supplies (``now``); the routing engine never reads a clock itself.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, Protocol, cast, runtime_checkable

from routing.prefix import DEFAULT_BLOCK_TOKENS
from routing.price import Price
from routing.quick_init import quick_init


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
    itl_ms: float = 20.0  # inter-token latency (one engine step) at a half-full batch
    # Token budget of one engine step (vLLM ``max_num_batched_tokens``): a prompt longer than
    # the budget left beside the decoding batch is prefilled over several steps.
    max_num_batched_tokens: int = 2048
    first_token_overhead_ms: float = 10.0
    cold_start_ms: float = 0.0
    idle_timeout_s: float | None = None  # serverless scale-to-zero; None = always warm
    weight: float = 1.0
    price: Price | None = None  # what a request costs here (routing.cost); None: nothing
    # The APIs (doors) it answers, by name ("chat", "embeddings", ...); None: every one.
    apis: frozenset[str] | None = None


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
    circuit_open: bool = False  # the gateway's circuit breaker refuses new requests
    # Ages of individual signals, when they come from different sources than ``as_of``.
    rtt_as_of: float | None = None  # when ``rtt_ms`` was measured (defaults to ``as_of``)
    metrics_as_of: float | None = None  # when running/waiting/kv were scraped (``as_of``)
    # Gateway-kind backends (another Meridian): per model, the TTFT its best local backend
    # would give a request with nothing to prefill (its RTT + queue + cold start + first-token
    # overhead), as that gateway reports it; routing adds the RTT to it and the prefill of
    # the uncached prompt. None: no report (the backend is then modelled like any other).
    downstream_ttft_ms: Mapping[str, float] | None = None
    downstream_as_of: float | None = None  # when that report was made (defaults to ``as_of``)
    # Uncached prompt tokens per second other clients sent over the last scrape interval,
    # from the engine's counters (``routing.arrivals``); None: not known.
    others_uncached_per_s: float | None = None
    others_requests_per_s: float | None = None  # ...and their requests per second
    # Of ``in_flight``, the requests the other replicas of this tier (the workers of one host,
    # the gateways sharing a store) have open, as the shared state last said; None: not
    # shared. Their requests sent since the last scrape are in no engine metric yet
    # (routing.load counts them, as it counts this router's own).
    others_in_flight: int | None = None


class SnapshotChanges(NamedTuple):
    """What a snapshot's builder knows changed since the snapshot before (``built_from``)."""

    previous: weakref.ReferenceType[FleetSnapshot]  # weak: no chain of old snapshots
    backends: frozenset[str]  # the only names whose state objects may differ from it


@dataclass(frozen=True, slots=True, weakref_slot=True)
class FleetSnapshot:
    """The in-memory view of the fleet a decision is taken on. Built off the request path."""

    backends: Mapping[str, BackendState]
    gateway_region: str | None = None
    # Estimated round trip (ms) from the gateway's region to each region.
    region_rtt_ms: Mapping[str, float] = field(default_factory=dict)
    taken_at: float = 0.0
    # A hint, not part of the value: set by ``built_from`` only, so ``replace`` (which may
    # change anything) never carries it over, and equality ignores it.
    changes: SnapshotChanges | None = field(default=None, init=False, compare=False, repr=False)


def built_from(
    snapshot: FleetSnapshot, previous: FleetSnapshot, backends: Iterable[str]
) -> FleetSnapshot:
    """Mark ``snapshot`` as ``previous`` with at most ``backends``' states replaced (every other
    name maps to the very same state object), so a ``FleetView`` following ``previous``
    rewrites those rows without comparing every backend. The builder vouches for it."""
    hint = SnapshotChanges(weakref.ref(previous), frozenset(backends))
    object.__setattr__(snapshot, "changes", hint)
    return snapshot


@quick_init
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
    # Seconds from arrival by which the first token must be out (gRPC deadline, an allowed
    # header, a rejecting objective class); the gateway refuses early when it is out of reach.
    deadline_s: float | None = None
    exclude: frozenset[str] = frozenset()  # backends a previous hop already passed through
    # Data residency: regions this request may be served from (None = any). The gateway
    # resolves its placement policy (per tenant / per origin) into this set.
    allowed_regions: frozenset[str] | None = None
    # Tokens per block of ``prefix_hashes``. A router whose prefix index uses a multiple of
    # this reads every k-th hash (a chained hash names its whole prefix); any other size
    # cannot be matched, and affinity is then ignored rather than miscounted.
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    # Soft placement preference: ms added to the *score* (not the predicted TTFT) of
    # candidates in these regions; shown as ``placement`` in the reasons. The gateway resolves
    # its per-tenant / per-origin region preferences into this.
    region_penalty_ms: Mapping[str, float] = field(default_factory=dict, hash=False)
    # The request's TTFT objective (ms, met when the predicted p90 is within it) and the class
    # it came from (tenant class or the allowed header), for ``slo_cost`` and early rejection.
    ttft_objective_ms: float | None = None
    objective_class: str | None = None
    # The API (door) the request came in by: only backends whose ``BackendSpec.apis`` has it
    # are candidates, so explain ranks what the relay may really try. None: any backend.
    api: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Candidate:
    """One eligible backend, in rank order, with its prediction broken into named terms."""

    backend: str
    score: float  # lower is better; the unit is the policy's (ms for predicted-TTFT)
    predicted_ttft_ms: float | None = None
    predicted_ttft_p90_ms: float | None = None
    terms_ms: Mapping[str, float] = field(default_factory=dict)
    reason: str = ""
    predicted_e2e_ms: float | None = None  # long-form: TTFT + ITL x expected output tokens
    cached_tokens: int = 0  # prompt tokens the prefix index expects this backend to hold
    term_age_s: Mapping[str, float] = field(default_factory=dict)  # age of each term's signal
    term_spread_ms: Mapping[str, float] = field(default_factory=dict)  # 1-sigma per term
    expected_cost: float | None = None  # this request's expected cost here (cost policies)


@quick_init
@dataclass(frozen=True, slots=True)
class Rejection:
    backend: str
    filter: str
    reason: str


@quick_init
@dataclass(frozen=True, slots=True)
class Decision:
    policy: str
    ranked: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...] = ()
    omitted: int = 0  # eligible candidates left out of ``ranked`` (hot path keeps the top few)
    note: str = ""  # one line for operators, e.g. why there is no backend
    # The chosen backend was picked to re-measure it (exploration), not for its score.
    explored: bool = False

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
    output_tokens: int = 0  # one choice's (a request for n choices decodes them side by side)
    ttft_ms: float | None = None
    itl_ms: float | None = None
    predicted_ttft_ms: float | None = None
    prefix_hashes: tuple[int, ...] = ()
    tenant: str = "default"
    error_kind: str | None = None
    # Copy of the chosen ``Candidate.terms_ms``: lets the learner tell which term was wrong.
    predicted_terms_ms: Mapping[str, float] = field(default_factory=dict)
    queue_wait_ms: float | None = None  # when the backend reports it (Server-Timing)
    cold_start: bool | None = None  # when the backend says this request hit a cold start
    block_tokens: int = DEFAULT_BLOCK_TOKENS  # of ``prefix_hashes`` (see RequestProfile)
    # The router was already told this request's TTFT at its first token
    # (``observe_first_token``): the end-of-stream observation must not learn it again.
    first_token_observed: bool = False


@dataclass(frozen=True, slots=True)
class FirstToken:
    """A routed request's first token reached the gateway at ``at``, ``ttft_ms`` after the
    request arrived: what routing learns then (``FirstTokenObserver.observe_first_token``)."""

    backend: str
    at: float
    ttft_ms: float
    # The chosen ``Candidate.terms_ms``: lets the learner tell which term was wrong.
    predicted_terms_ms: Mapping[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    predicted_ttft_ms: float | None = None
    queue_wait_ms: float | None = None  # when the backend reports it (Server-Timing)
    cold_start: bool | None = None  # when the backend says this request hit a cold start

    def observation(self) -> Observation:
        """The same, as the learner reads an outcome (marked as learned at the first token)."""
        return Observation(
            self.backend,
            self.at,
            ok=True,
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            ttft_ms=self.ttft_ms,
            predicted_ttft_ms=self.predicted_ttft_ms,
            predicted_terms_ms=self.predicted_terms_ms,
            queue_wait_ms=self.queue_wait_ms,
            cold_start=self.cold_start,
            first_token_observed=True,
        )


class Router(Protocol):
    """A routing policy. ``decide`` must be pure given its inputs and the router's own state."""

    name: str

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision: ...

    def observe(self, observation: Observation) -> None: ...


@runtime_checkable
class FirstTokenObserver(Protocol):
    """A router that learns TTFT at the first token (every ``PipelineRouter``). The gateway
    calls ``observe_first_token`` when the first token arrives, then ``observe`` at the end
    with ``Observation.first_token_observed=True`` (which releases in flight, records the
    prefix and learns ITL, without learning the TTFT twice)."""

    def observe_first_token(self, first: FirstToken) -> None: ...


def first_token_observer(router: object) -> FirstTokenObserver | None:
    """``router`` if it takes ``observe_first_token``, else None. Asked once per class: an
    ``isinstance`` against the runtime Protocol walks its members (~3 us), and the gateway and
    the simulator ask at every first token (a reload or a swap may change the router)."""
    kind = type(router)
    if (takes := _OBSERVES_FIRST_TOKENS.get(kind)) is None:
        takes = _OBSERVES_FIRST_TOKENS[kind] = issubclass(kind, FirstTokenObserver)
    return cast(FirstTokenObserver, router) if takes else None


_OBSERVES_FIRST_TOKENS: dict[type, bool] = {}


class PolicyRouter(Router, Protocol):
    """What every Meridian policy offers beyond ``Router``: in-flight accounting and explain.

    In-flight contract (anti-herding): ``decide`` counts its chosen backend as in flight at
    ``now``. The request then leaves that count through exactly one of ``observe`` (it
    finished, learn from it) or ``release`` (it never reached the backend, or the gateway gave
    up without an outcome worth learning from). When the gateway moves on to another ranked
    candidate, it calls ``release(first)`` then ``reserve(next, now)``. Releasing more than
    was reserved is harmless; reservations not released expire after the policy's TTL.
    """

    def reserve(self, backend: str, now: float) -> None: ...

    def release(self, backend: str) -> None: ...

    def explain(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        """Every candidate and rejection, without reserving anything or advancing state."""
        ...
