"""The SignalHub: owns the signal loops and hands routing a cheap, current FleetSnapshot.

Write side (gateway, synchronous, microseconds): ``on_request_start`` / ``on_request_end``
update local in-flight counts, last-traffic times and the outlier detector. Background side:
probes, scrapes, GeoIP reloads and a once-a-second tick (readmissions, age gauges). Read side:
``snapshot()`` returns the cached ``FleetSnapshot`` and rebuilds only the backends that changed,
at most once every ``snapshot_min_interval_ms``, so the request path never pays for a rebuild
it does not need and never waits on I/O.

With a ``SharedFleet`` (gateway/state/fleet_bridge.py: replicas sharing state through Redis),
in-flight counts are the sum over replicas, a backend is probed and scraped only by the replica
holding its lease, which publishes the results, and every other replica reads them into its
snapshot (the newer of its own and the shared measurement wins).
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from aiohttp.abc import AbstractResolver
from prometheus_client import CollectorRegistry

from gateway.chain.config import ChainConfig
from gateway.chain.poller import SummaryPoller
from gateway.chain.report import DownstreamReport
from gateway.observability.events import gateway_event
from gateway.signals.arrivals_feed import ArrivalsFeed
from gateway.signals.config import SignalsConfig as SignalsConfig
from gateway.signals.engine_signals import EngineSignals
from gateway.signals.errors import SignalError
from gateway.signals.geo import ClientGeo, GeoLocator
from gateway.signals.metrics import SignalMetrics
from gateway.signals.outlier import (
    FailureKind,
    HealthView,
    OutlierDetector,
    OutlierEvent,
    OutlierEventKind,
)
from gateway.signals.probes import ProbeObserver, Prober, ProbeSummary
from gateway.signals.rtt_policy import RttPolicy, routed_rtt
from gateway.signals.shared_fleet import LeaderScraper, SharedFleet
from gateway.signals.targets import BackendTarget
from gateway.signals.tasks import TaskOwner, run_aligned
from routing.types import BackendState, FleetSnapshot, built_from

logger = logging.getLogger(__name__)


_PROBED = RttPolicy()  # route on the probe's RTT as measured (the default)


class SignalHub(ProbeObserver):
    def __init__(
        self,
        targets: Sequence[BackendTarget],
        config: SignalsConfig,
        *,
        gateway_region: str | None = None,
        region_rtt_ms: Mapping[str, float] | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        shared: SharedFleet | None = None,
        chain: ChainConfig | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        """``resolver``: backend host names to their pinned addresses (gateway/pinning), for
        every probe, scrape and summary poll."""
        self._targets = {t.name: t for t in targets}
        # On their probe's own RTT (the default): asked per snapshot, where == is pydantic's.
        self._rtt_probed = frozenset(name for name, t in self._targets.items() if t.rtt == _PROBED)
        self.chain = chain = chain or ChainConfig()
        self.gateway_id = chain.gateway_id(gateway_region)
        self._shared = shared
        self._shared_version = -1
        self._remote_active: dict[str, bool] = {}  # active-probe verdicts of other replicas
        self._config = config
        self._clock = clock
        self._rng = rng or random.Random()
        self._gateway_region = gateway_region
        self._configured_region_rtt = dict(region_rtt_ms or {})
        self._metrics = SignalMetrics(registry) if registry is not None else None
        self._in_flight = dict.fromkeys(self._targets, 0)
        self.arrivals = ArrivalsFeed(self._targets, config.engine_metrics.others_arrivals)
        self._last_traffic: dict[str, float] = {}
        self.outlier = OutlierDetector(self._targets, config.outlier, clock)
        self.prober = Prober(
            targets,
            config.probes,
            clock=clock,
            rng=self._rng,
            last_traffic=self._last_traffic.get,
            on_traffic=self._note_traffic,
            observer=self,
            should_probe=shared.leads if shared is not None else _always,
            resolver=resolver,
        )
        self.scraper = LeaderScraper(
            targets,
            config.engine_metrics,
            clock=clock,
            rng=self._rng,
            observer=self,
            leads=shared.leads if shared is not None else _always,
            resolver=resolver,
        )
        # Every replica polls its gateway-kind backends itself (gateway/chain/poller.py).
        self.summaries = SummaryPoller(
            targets,
            chain.summary,
            own_id=self.gateway_id,
            max_hops=chain.max_hops,
            clock=clock,
            rng=self._rng,
            on_change=self._dirty_backend,
            resolver=resolver,
        )
        self.geo = GeoLocator(config.geo, rng=self._rng)
        self._tasks = TaskOwner()
        self._states: dict[str, BackendState] = {}
        self._dirty: set[str] = set(self._targets)
        self._snapshot: FleetSnapshot | None = None
        self._built_at = float("-inf")
        # Canary first tokens not yet handed to routing (gateway/canary_learning.py drains
        # them): (backend, when, TTFT ms, found cold). Bounded: an idle drain loses the oldest.
        self.canaries: deque[tuple[str, float, float, bool]] = deque(maxlen=256)

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        if self._tasks.running:
            return
        await self.geo.start()
        await self.prober.start()
        await self.scraper.start()
        await self.summaries.start()
        self._tasks.spawn(
            run_aligned(
                self._tick_loop_step,
                interval_s=self._config.tick_interval_s,
                name="signal-hub-tick",
            ),
            name="meridian-signal-hub-tick",
        )

    async def stop(self) -> None:
        await self._tasks.stop()
        await self.summaries.stop()
        await self.scraper.stop()
        await self.prober.stop()
        await self.geo.stop()

    # -- write side (request path) -------------------------------------------------------

    def on_request_start(self, backend: str) -> None:
        if backend not in self._in_flight:
            return
        self._in_flight[backend] += 1
        if self._shared is not None:
            self._shared.note_in_flight(backend, +1)
        self._note_traffic(backend, self._clock())

    def on_request_end(self, backend: str, ok: bool, failure: FailureKind | None = None) -> None:
        """A request to ``backend`` finished. ``failure`` says why not, when ``ok`` is False."""
        if backend not in self._in_flight:
            return
        if self._in_flight[backend] > 0 and self._shared is not None:
            self._shared.note_in_flight(backend, -1)
        self._in_flight[backend] = max(0, self._in_flight[backend] - 1)
        self._note_traffic(backend, self._clock())
        self._handle(self.outlier.record(backend, ok, failure))

    def _dirty_backend(self, backend: str) -> None:
        self._dirty.add(backend)

    def _note_traffic(self, backend: str, at: float) -> None:
        self._last_traffic[backend] = at
        self._dirty.add(backend)

    # -- read side -----------------------------------------------------------------------

    def locate(self, peer: str | None, forwarded_for: str | Sequence[str] | None) -> ClientGeo:
        return self.geo.locate(peer, forwarded_for)

    def health(self) -> HealthView:
        return self.outlier.health()

    def downstream_reports(self) -> dict[str, DownstreamReport]:
        return self.summaries.reports()

    def downstream_ids(self) -> dict[str, str]:
        return self.summaries.remote_ids()

    def in_flight(self, backend: str) -> int:
        """This replica's own open requests to ``backend`` (the snapshot has the tier's)."""
        return self._in_flight.get(backend, 0)

    async def warm_up(self, backend: str) -> bool:
        """Send ``backend`` a one-token canary now (the router's pre-warm asked for it); it
        counts as traffic. False when ``backend`` is not in this fleet."""
        target = self._targets.get(backend)
        if target is None:
            return False
        await self.prober.canary_once(target)
        return True

    def snapshot(self) -> FleetSnapshot:
        now = self._clock()
        cached = self._snapshot
        if cached is not None:
            if (now - self._built_at) * 1000.0 < self._config.snapshot_min_interval_ms:
                return cached
            self._follow_shared(now)
            if not self._dirty:
                return cached
        else:
            self._follow_shared(now)
        health = self.outlier.health()
        probes = self.prober.summaries()
        for name in self._dirty:
            self._states[name] = self._state(name, health, probes.get(name), now)
        self._snapshot = FleetSnapshot(
            backends=dict(self._states),
            gateway_region=self._gateway_region,
            region_rtt_ms=self._region_rtts(),
            taken_at=now,
        )
        if cached is not None:  # only the dirty rows differ: routing's view rewrites those
            built_from(self._snapshot, cached, self._dirty)
        self._dirty.clear()
        self._built_at = now
        return self._snapshot

    def _follow_shared(self, now: float) -> None:
        """Take in what other replicas changed: active-probe verdicts into outlier detection,
        and a rebuild of every backend (their counts and measurements enter in ``_state``)."""
        shared = self._shared
        if shared is None or shared.version() == self._shared_version:
            return
        self._shared_version = shared.version()
        self._dirty.update(self._targets)
        for name in self._targets:
            probe = self.prober.summary(name)
            local_at = probe.last_probe_at if probe is not None else None
            verdict = shared.remote_active_health(name, local_at, now)
            if verdict is None:
                self._remote_active.pop(name, None)
            else:
                self._remote_active[name] = verdict
                self._handle(self.outlier.set_active_health(name, verdict))

    def _publish(self, backend: str) -> None:
        shared = self._shared
        if shared is None or backend not in self._targets or not shared.leads(backend):
            return
        now = self._clock()
        probe = self.prober.summary(backend)
        shared.publish(self._measured(backend, self.outlier.health(), probe, now), probe, now)

    def _state(
        self, name: str, health: HealthView, probe: ProbeSummary | None, now: float
    ) -> BackendState:
        state = self._measured(name, health, probe, now)
        state = state if self._shared is None else self._shared.merge(state, now)
        region_rtt = self._configured_region_rtt.get(state.spec.region)
        probed = name in self._rtt_probed
        return state if probed else routed_rtt(state, self._targets[name].rtt, region_rtt, now)

    def _measured(
        self, name: str, health: HealthView, probe: ProbeSummary | None, now: float
    ) -> BackendState:
        target = self._targets[name]
        engine = self.scraper.latest(name)
        rtt_at = probe.last_ok_at if probe is not None else None
        metrics_at = engine.as_of if engine is not None else None
        known = [at for at in (rtt_at, metrics_at) if at is not None]
        downstream = self.summaries.latest(name)
        return self.arrivals.filled(BackendState(
            spec=target.spec,
            healthy=name in health.healthy,
            ejected_until=None if health.panic else health.ejected_until.get(name),
            in_flight=self._in_flight[name],
            running=engine.running if engine is not None else None,
            waiting=engine.waiting if engine is not None else None,
            kv_cache_usage=engine.kv_cache_usage if engine is not None else None,
            rtt_ms=probe.rtt_ms if probe is not None else None,
            last_traffic_at=self._last_traffic.get(name),
            as_of=max(known) if known else 0.0,
            rtt_as_of=rtt_at,
            metrics_as_of=metrics_at,
            downstream_ttft_ms=downstream.ttft_ms if downstream is not None else None,
            downstream_as_of=downstream.as_of if downstream is not None else None,
        ))  # fmt: skip

    def _region_rtts(self) -> dict[str, float]:
        """Configured gateway-to-region RTTs, replaced by the best probe RTT where measured
        (here or, with shared state, by the replica that probes the backend)."""
        measured: dict[str, float] = {}
        for name, summary in self.prober.summaries().items():
            state = self._states.get(name)
            rtt = state.rtt_ms if state is not None else summary.rtt_ms
            target = self._targets[name]
            region = target.spec.region
            healthy = self._remote_active.get(name, summary.active_healthy)
            if rtt is not None and healthy and name in self._rtt_probed:  # the probe's own RTT
                measured[region] = min(measured.get(region, rtt), rtt)
        return {**self._configured_region_rtt, **measured}

    # -- observers and housekeeping -------------------------------------------------------

    def on_probe(
        self,
        summary: ProbeSummary,
        pooled_ms: float | None,
        fresh_ms: float | None,
        error: SignalError | None,
    ) -> None:
        self._dirty.add(summary.backend)
        self._remote_active.pop(summary.backend, None)  # our own verdict is the newest now
        self._handle(self.outlier.set_active_health(summary.backend, summary.active_healthy))
        self._publish(summary.backend)
        if self._metrics is not None:
            self._metrics.on_probe(summary, pooled_ms, fresh_ms, error)

    def on_canary(self, summary: ProbeSummary, ttft_ms: float, cold: bool) -> None:
        at = summary.last_canary_at
        self.canaries.append((summary.backend, self._clock() if at is None else at, ttft_ms, cold))
        if self._metrics is not None:
            self._metrics.on_canary(summary, ttft_ms, cold)

    def on_scrape(
        self, backend: str, result: EngineSignals | SignalError, duration_s: float
    ) -> None:
        self._dirty.add(backend)
        if isinstance(result, EngineSignals):
            self.arrivals.scraped(backend, result)
            self._publish(backend)
        if self._metrics is not None:
            self._metrics.on_scrape(backend, result, duration_s)

    async def _tick_loop_step(self) -> None:
        self.tick()

    def tick(self) -> None:
        """Housekeeping the background loop runs every ``tick_interval_s``: readmissions,
        failure-rate windows, signal-age gauges. Cheap and synchronous."""
        self._handle(self.outlier.tick())
        self._dirty.update(self.summaries.polled_backends)  # a report may have aged out
        if self._metrics is None:
            return
        now = self._clock()
        for name in self._targets:
            probe = self.prober.summary(name)
            last_ok = probe.last_ok_at if probe is not None else None
            self._metrics.set_age(name, "probe", None if last_ok is None else now - last_ok)
            engine = self.scraper.latest(name)
            age = None if engine is None else now - engine.as_of
            self._metrics.set_age(name, "engine_metrics", age)

    def _handle(self, events: Iterable[OutlierEvent]) -> None:
        events = list(events)
        if not events:
            return
        self._dirty.update(self._targets)  # ejections and panic change every backend's view
        for event in events:
            _log_event(event)
        if self._metrics is not None:
            self._metrics.on_outlier_events(events)


def _always(_backend: str) -> bool:
    return True


def _log_event(event: OutlierEvent) -> None:
    if event.kind is OutlierEventKind.EJECTED:
        until = event.until - event.at if event.until is not None else 0.0
        gateway_event(
            "backend_ejected",
            f"ejected backend {event.backend} for {until:.0f}s (ejection #{event.ejections}): "
            f"{event.reason}",
            logging.WARNING,
            backend=event.backend,
            ejection_s=round(until, 3),
            ejections=event.ejections,
            reason=event.reason,
        )
    elif event.kind is OutlierEventKind.READMITTED:
        gateway_event(
            "backend_readmitted", f"readmitted backend {event.backend}", backend=event.backend
        )
    elif event.kind is OutlierEventKind.EJECTION_SKIPPED:
        logger.debug("not ejecting %s (cap reached): %s", event.backend, event.reason)
    else:
        logger.warning("outlier %s: %s", event.kind, event.reason)
