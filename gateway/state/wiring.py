"""Shared state wired into a running gateway: one ``SharedState`` per replica.

    shared = SharedState.from_config(config, metrics.registry)
    hub = build_signal_hub(config, metrics.registry, shared.fleet)   # tier-wide signals
    router = shared.wrap_router(build_router(...))                   # shared prefix affinity
    install_shared_state(app, shared, lambda: relay.fleet)  # lifecycle + GET /v1/meridian/state

With the default ``state.backend: memory`` the same wiring runs against a store private to
the process, so one replica behaves as before. Nothing here is awaited on the request path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence

import xxhash
from aiohttp import web
from prometheus_client import CollectorRegistry

from gateway.config import ConfigError, GatewayConfig
from gateway.signals.hub import SignalHub
from gateway.state.errors import StateUnavailable
from gateway.state.fleet_bridge import SharedFleetBridge
from gateway.state.health import StateHealth
from gateway.state.metrics import register_state_metrics
from gateway.state.router_bridge import (
    RemotePrefixFeeder,
    SharedPrefixRouter,
    prefix_recorder_of,
)
from gateway.state.sample_feeder import RemoteSampleFeeder, SamplePublisher, peer_learner_of
from gateway.state.sync import SharedStateSync
from routing.types import PolicyRouter

log = logging.getLogger("meridian.state")

STATE_PATH = "/v1/meridian/state"


class SharedState:
    def __init__(
        self,
        sync: SharedStateSync,
        backends: Sequence[str],
        registry: CollectorRegistry | None = None,
        shared_between_replicas: bool = False,
        region: str = "",
        share_learning: bool = False,
    ) -> None:
        self.sync = sync
        self.shared_between_replicas = shared_between_replicas
        self.fleet = SharedFleetBridge(sync)
        self.feeder = RemotePrefixFeeder()
        self.samples = RemoteSampleFeeder(region)
        self._region = region
        self._share_learning = share_learning
        self._publisher: SamplePublisher | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.fleet.contend(backends)
        sync.snapshot().on_remote_prefix = self.feeder.offer
        sync.snapshot().on_remote_samples = self.samples.offer
        if registry is not None:
            register_state_metrics(sync, registry)

    @classmethod
    def from_config(
        cls, config: GatewayConfig, registry: CollectorRegistry | None = None
    ) -> SharedState:
        """Raises ``ConfigError`` when the ``state:`` password source cannot be read; never
        connects (a store that is down at start-up only makes the replica degraded)."""
        try:
            sync = SharedStateSync.from_config(config.state)
        except StateUnavailable as exc:
            raise ConfigError(exc.error.message) from None
        shared = config.state.backend != "memory"
        backends = [b.name for b in config.backends]
        return cls(
            sync, backends, registry, shared, config.region or "", config.state.share_learning
        )

    def seed_salt(self) -> int:
        """Per-replica salt for the routing seed; 0 when state is not shared (one replica)."""
        if not self.shared_between_replicas:
            return 0
        return xxhash.xxh32_intdigest(self.sync.replica.encode())

    def wrap_router(self, router: PolicyRouter) -> PolicyRouter:
        """``router`` sharing the prefixes it learns and learning the other replicas'. Called
        again on a reload that builds a new router: the newest one learns from then on."""
        recorder = prefix_recorder_of(router)
        if recorder is None:
            log.info("routing policy %s keeps no prefix index: nothing to share", router.name)
        self.feeder.recorder = recorder
        learner = peer_learner_of(router) if self._share_learning else None
        self.samples.learner = learner
        if not self.shared_between_replicas:
            # A store private to this process has no other reader: sharing would only keep
            # every prefix block twice more (local view and store) beside the router's index.
            return router
        if learner is not None:
            self._publisher = SamplePublisher(learner, self.sync, self._region)
        return SharedPrefixRouter(router, self.sync, self._publisher)

    def health(self) -> StateHealth:
        """For ``/readyz`` details: ``health().as_dict()``, status ``ok`` or ``degraded``."""
        return self.sync.health()

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        """aiohttp ``cleanup_ctx``: register it before the signal hub's, so the hub starts
        after the sync and stops before it (its last counts and leases are released)."""
        await self.sync.start()
        self._tasks = [
            asyncio.create_task(self.feeder.run(), name="meridian-state-prefix-feeder"),
            asyncio.create_task(self.samples.run(), name="meridian-state-sample-feeder"),
        ]
        yield
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.sync.stop()

    def describe(self, hub: SignalHub) -> dict[str, object]:
        """What ``GET /v1/meridian/state`` answers: counts and states, never prompt data."""
        snapshot = hub.snapshot()
        view = self.sync.snapshot()
        probes = hub.prober.summaries()
        names = sorted(snapshot.backends)
        pub = self._publisher
        return {
            "health": self.health().as_dict(),
            "in_flight": {name: s.in_flight for name, s in snapshot.backends.items()},
            "signal_age_s": {
                name: (snapshot.taken_at - s.as_of) if s.as_of else None
                for name, s in snapshot.backends.items()
            },
            "own_in_flight": {name: hub.in_flight(name) for name in names},
            "leads": [name for name in names if self.fleet.leads(name)],
            "probes_total": {name: p.probes_total for name, p in probes.items()},
            "prefix_blocks": view.prefix_sizes(),
            "prefix_fed_blocks": self.feeder.fed_blocks,
            "prefix_queued_blocks": self.feeder.queued,
            "learning_samples_published": 0 if pub is None else pub.published,
            "learning_samples_fed": self.samples.fed,
            "learning_samples_queued": self.samples.queued,
            "learning_samples_other_region": self.samples.other_region,
        }


STATE = web.AppKey("meridian_state", SharedState)


def install_shared_state(
    app: web.Application, shared: SharedState, hub: SignalHub | Callable[[], SignalHub]
) -> None:
    """Attach ``shared`` to ``app``: ``app[STATE]``, its lifecycle, and the state route.
    ``hub`` may be a callable returning the current hub (a reload can replace it)."""
    app[STATE] = shared
    app.cleanup_ctx.append(shared.lifecycle)
    current = hub if callable(hub) else (lambda: hub)

    async def state_route(request: web.Request) -> web.Response:
        return web.json_response(shared.describe(current()))

    app.router.add_get(STATE_PATH, state_route)
