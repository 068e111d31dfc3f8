"""Everything the relay takes from one configuration, as one object that is swapped whole.

A reload builds a new :class:`RelayState` (reusing the parts whose configuration did not
change: the router with what it learned, the signal hub, each backend's connection pool) and
the relay swaps it in with one assignment. A request keeps the state it started with until it
finishes, so a reload never changes a running stream; ``active`` counts those requests so the
retired state's own parts (removed backends' pools, an old hub) are closed once it is idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from aiohttp.abc import AbstractResolver
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from gateway.admission import Admission
from gateway.config import GatewayConfig, HedgingConfig
from gateway.fleet import build_signal_hub
from gateway.model_names import ModelNames
from gateway.retry_budget import RetryBudget
from gateway.signals.hub import SignalHub
from gateway.upstream import UpstreamPool
from routing.policies import build_router
from routing.types import BackendSpec, LatencyClass, PolicyRouter


@dataclass(frozen=True, slots=True)
class ClassPolicy:
    """The stream timeouts and hedging that apply to one latency class."""

    first_token_s: float
    inter_token_s: float
    total_s: float
    hedging: HedgingConfig


def class_policies(config: GatewayConfig) -> dict[LatencyClass, ClassPolicy]:
    base = config.timeouts
    policies = {}
    for latency_class in LatencyClass:
        override = config.route_classes.get(latency_class.value)
        timeouts = override.timeouts if override is not None else None
        hedging = override.hedging if override is not None else None
        policies[latency_class] = ClassPolicy(
            first_token_s=(timeouts and timeouts.first_token_s) or base.first_token_s,
            inter_token_s=(timeouts and timeouts.inter_token_s) or base.inter_token_s,
            total_s=(timeouts and timeouts.total_s) or base.total_s,
            hedging=hedging or config.hedging,
        )
    return policies


def upstream_read_bufsize(config: GatewayConfig) -> int:
    """A quarter of the stream bound: aiohttp pauses the upstream socket at twice this."""
    return config.streams.buffer_bytes // 4


HubFactory = Callable[[GatewayConfig, CollectorRegistry], SignalHub]
RouterWrapper = Callable[[PolicyRouter], PolicyRouter]


def _unwrapped(router: PolicyRouter) -> PolicyRouter:
    return router


@dataclass(frozen=True, slots=True)
class Builders:
    """How the app builds a hub and wraps a router (shared state); a reload reuses them."""

    hub: HubFactory = build_signal_hub
    wrap_router: RouterWrapper = _unwrapped
    # Mixed into the routing seed: replicas sharing one config must not break ties in lockstep
    # (they would herd onto the same backend). 0 keeps a lone gateway reproducible.
    seed_salt: int = 0
    # gateway/pinning: upstream connections resolve backend hosts to their pinned addresses.
    resolver: AbstractResolver | None = None


@dataclass(eq=False, slots=True)
class RelayState:
    config: GatewayConfig
    pool: UpstreamPool
    router: PolicyRouter
    fleet: SignalHub
    hub_registry: CollectorRegistry
    budget: RetryBudget
    admission: Admission
    builders: Builders = Builders()
    specs: Mapping[str, BackendSpec] = field(default_factory=dict)
    apis: Mapping[str, frozenset[str]] = field(default_factory=dict)  # backend -> its APIs
    # Accepted model names -> public names (aliases), and each backend's own ids.
    known_models: ModelNames = field(default_factory=ModelNames)
    policies: Mapping[LatencyClass, ClassPolicy] = field(default_factory=dict)
    active: int = 0  # requests that started on this state and have not finished
    _idle: asyncio.Event | None = None

    def policy(self, latency_class: LatencyClass) -> ClassPolicy:
        return self.policies[latency_class]

    def enter(self) -> None:
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        if self.active <= 0 and self._idle is not None:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Until every request that started on this state has finished."""
        if self.active <= 0:
            return
        self._idle = asyncio.Event()
        await self._idle.wait()


def _same_fleet(a: GatewayConfig, b: GatewayConfig) -> bool:
    return (a.backends, a.signals, a.regions, a.region) == (
        b.backends,
        b.signals,
        b.regions,
        b.region,
    )


def build_state(
    config: GatewayConfig,
    router: PolicyRouter | None = None,
    previous: RelayState | None = None,
    builders: Builders | None = None,
) -> RelayState:
    """A state for ``config``, sharing with ``previous`` every part whose config is unchanged."""
    builders = builders or (previous.builders if previous is not None else Builders())
    old = previous.config if previous is not None else None
    if (
        router is None
        and previous is not None
        and old is not None
        and old.routing == config.routing
    ):
        router = previous.router
    if router is None:
        policy = config.routing
        seed = policy.seed ^ builders.seed_salt
        router = builders.wrap_router(build_router(policy.policy, policy.params, seed))
    if previous is not None and old is not None and _same_fleet(old, config):
        hub, hub_registry = previous.fleet, previous.hub_registry
    else:
        hub_registry = CollectorRegistry()
        hub = builders.hub(config, hub_registry)
    reuse = previous.pool if previous is not None else None
    pool = UpstreamPool(
        config.backends, config.timeouts, upstream_read_bufsize(config), reuse, builders.resolver
    )
    budget = RetryBudget(config.retry.budget_ratio, config.retry.budget_burst)
    admission = Admission(config.admission)
    if previous is not None and old is not None:
        budget = previous.budget if old.retry == config.retry else budget
        admission = previous.admission if old.admission == config.admission else admission
    return RelayState(
        config=config,
        pool=pool,
        router=router,
        fleet=hub,
        hub_registry=hub_registry,
        budget=budget,
        admission=admission,
        builders=builders,
        specs={b.name: b.spec() for b in config.backends},
        known_models=ModelNames.from_config(config),
        apis={b.name: frozenset(b.apis) for b in config.backends},
        policies=class_policies(config),
    )


class HubMetrics:
    """A collector on the gateway's registry that shows the current signal hub's metrics."""

    def __init__(self, current: CollectorRegistry) -> None:
        self.current = current

    def collect(self) -> Iterator[Metric]:
        yield from self.current.collect()
