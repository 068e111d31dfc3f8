"""The gateway's live view of the fleet: configuration plus every signal, as routing sees it.

The request path only calls the synchronous methods of :class:`FleetView`; the probes, scrapes
and outlier bookkeeping behind them run in background tasks owned by the
:class:`~gateway.signals.hub.SignalHub`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from aiohttp.abc import AbstractResolver
from prometheus_client import CollectorRegistry

from gateway.auth.tls import backend_context
from gateway.config import BackendConfig, GatewayConfig
from gateway.signals.geo import ClientGeo, RegionLocation
from gateway.signals.hub import SignalHub, SignalsConfig
from gateway.signals.outlier import FailureKind, HealthView
from gateway.signals.shared_fleet import SharedFleet
from gateway.signals.targets import BackendTarget, Engine
from routing.types import FleetSnapshot

_SCRAPED_ENGINES = {e.value: e for e in Engine}


class FleetView(Protocol):
    def snapshot(self) -> FleetSnapshot: ...

    def on_request_start(self, backend: str) -> None: ...

    def on_request_end(
        self, backend: str, ok: bool, failure: FailureKind | None = None
    ) -> None: ...

    def in_flight(self, backend: str) -> int: ...

    def health(self) -> HealthView: ...

    def locate(self, peer: str | None, forwarded_for: str | Sequence[str] | None) -> ClientGeo: ...


def _target(backend: BackendConfig) -> BackendTarget:
    headers = {}
    if backend.api_key is not None:
        headers["Authorization"] = f"Bearer {backend.api_key.resolve()}"
    return BackendTarget(
        spec=backend.spec(),
        base_url=backend.base_url(),
        engine=_SCRAPED_ENGINES.get(backend.engine, Engine.UNKNOWN),
        keep_warm=backend.keep_warm,
        headers=headers,
        rtt=backend.rtt,
        tls=backend_context(backend.name, backend.tls),
    )


def _signals_config(config: GatewayConfig) -> SignalsConfig:
    """Geo needs region coordinates; take them from ``regions`` unless given explicitly."""
    signals = config.signals
    if signals.geo.regions:
        return signals
    located = {
        r.name: RegionLocation(latitude=r.location.lat, longitude=r.location.lon)
        for r in config.regions
        if r.location is not None
    }
    return signals.model_copy(update={"geo": signals.geo.model_copy(update={"regions": located})})


def build_signal_hub(
    config: GatewayConfig,
    registry: CollectorRegistry,
    shared: SharedFleet | None = None,
    resolver: AbstractResolver | None = None,
) -> SignalHub:
    """The hub for ``config``; with ``shared`` (gateway/state/wiring.py) it routes as one with
    the other replicas: tier-wide in-flight counts, each backend probed by one replica."""
    return SignalHub(
        [_target(b) for b in config.backends],
        _signals_config(config),
        gateway_region=config.region,
        region_rtt_ms={r.name: r.rtt_ms for r in config.regions if r.rtt_ms is not None},
        registry=registry,
        shared=shared,
        chain=config.chain,
        resolver=resolver,
    )
