"""What each gateway knows, with the staleness it would have in production.

Engine metrics (running, waiting, KV use) are scraped on an interval; RTT probes run on a longer
one with noise; in-flight counts and last-traffic times are the gateway's own, so immediate.
Each gateway rebuilds its ``FleetSnapshot`` on the snapshot interval, as the gateway's signal
hub does; between rebuilds the router's own in-flight ledger carries the new load. With shared
in-flight counts (``shared_in_flight.py``) the other gateways' counts arrive as they change,
and each arrival refreshes that backend's state in the snapshot, as the hub's next snapshot
would carry it.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from loadtests.emulator.engine import EngineCounters
from loadtests.sim.fleet import SimBackend
from loadtests.sim.scenario import Scenario
from routing.arrivals import ArrivalLedger, EngineTotals
from routing.types import BackendState, FleetSnapshot, built_from


@dataclass(slots=True)
class Scrape:
    counters: EngineCounters
    at: float


@dataclass(slots=True)
class GatewaySignals:
    index: int
    region: str
    region_rtt_ms: dict[str, float]
    in_flight: list[int]
    last_traffic: list[float | None]
    probe_rtt_ms: list[float | None]
    probe_at: list[float | None]
    snapshot: FleetSnapshot = field(default_factory=lambda: FleetSnapshot(backends={}))
    # Per backend: prompt tokens sent, as (when they reach the engine: half the probed RTT
    # later, as the gateway would reckon it, tokens), not yet counted against a scrape.
    sending: list[deque[tuple[float, int]]] = field(default_factory=list)
    ledgers: list[ArrivalLedger] = field(default_factory=list)  # routing.arrivals
    others: list[int] = field(default_factory=list)  # the other gateways' open requests

    def sent(self, backend: int, now: float, prompt_tokens: int = 0) -> None:
        self.in_flight[backend] += 1
        self.last_traffic[backend] = now
        rtt = self.probe_rtt_ms[backend]
        self.sending[backend].append((now + (rtt or 0.0) / 2000.0, prompt_tokens))

    def own_arrived(self, backend: int, by: float) -> tuple[int, int]:
        """Requests and prompt tokens this gateway sent that reached ``backend`` by ``by``
        (each counted once)."""
        sending, count, total = self.sending[backend], 0, 0
        while sending and sending[0][0] <= by:
            total += sending.popleft()[1]
            count += 1
        return count, total

    def done(self, backend: int, now: float, cached_tokens: int = 0) -> None:
        """A request came back; its usage reported ``cached_tokens`` (the gateway's own hits,
        learned at the end of the answer, as the gateway's hub learns them)."""
        self.in_flight[backend] -= 1
        self.last_traffic[backend] = now
        self.ledgers[backend].hit(cached_tokens)


class SignalModel:
    def __init__(self, scenario: Scenario, backends: Sequence[SimBackend], gateways: Sequence[str]):
        self.scenario = scenario
        self.backends = backends
        self._rng = random.Random(f"{scenario.seed}/probes")
        self.arrivals = scenario.signals.engine_counters
        size = len(backends)
        self.scrapes: list[Scrape | None] = [None] * size
        self.gateways = [
            GatewaySignals(
                i, region, {r: scenario.rtt(region, r) for r in scenario.regions},
                [0] * size, [None] * size, [None] * size, [None] * size,
            )
            for i, region in enumerate(gateways)
        ]  # fmt: skip
        self.shared_in_flight = scenario.signals.shared_in_flight_delay_s is not None
        for gateway in self.gateways:
            gateway.sending = [deque() for _ in range(size)]
            gateway.ledgers = [ArrivalLedger() for _ in range(size)]
            gateway.others = [0] * size

    def others_moved(self, gateway: int, backend: int, delta: int) -> None:
        """Another gateway's open requests to ``backend`` moved by ``delta``, as the shared
        state now tells ``gateway``: its snapshot follows for that backend."""
        signals = self.gateways[gateway]
        signals.others[backend] += delta
        old = signals.snapshot
        name = self.backends[backend].name
        state = old.backends.get(name)
        if state is None:  # before the first snapshot: the first one will carry it
            return
        others = signals.others[backend]
        states = dict(old.backends)
        states[name] = dataclasses.replace(
            state, in_flight=signals.in_flight[backend] + others, others_in_flight=others
        )
        signals.snapshot = built_from(dataclasses.replace(old, backends=states), old, (name,))

    def scrape(self, now: float) -> None:
        for backend in self.backends:
            self.scrape_one(backend, now)

    def scrape_one(self, backend: SimBackend, now: float) -> None:
        """``backend``'s engine metrics, read now (``scrape`` reads every backend's at once;
        a per-backend schedule, ``loadtests/sim/signal_schedule.py``, one at a time)."""
        i = backend.index
        scrape = Scrape(backend.engine.counters(now), now)
        self.scrapes[i] = scrape
        counters = scrape.counters  # the engine's counters, as the gateway's hub reads them
        totals = EngineTotals(
            now, counters.prefix_queries_tokens, counters.prefix_hits_tokens, counters.requests
        )
        for gateway in self.gateways:
            own_requests, own = gateway.own_arrived(i, now)
            ledger = gateway.ledgers[i]
            ledger.sent(own, own_requests)
            ledger.scraped(totals)

    def probe(self, now: float) -> None:
        for gateway in self.gateways:
            for backend in self.backends:
                self._probe(gateway, backend, now)

    def probe_one(self, backend: SimBackend, now: float) -> None:
        """Every gateway probes ``backend`` now (a per-backend schedule's probe)."""
        for gateway in self.gateways:
            self._probe(gateway, backend, now)

    def _probe(self, gateway: GatewaySignals, backend: SimBackend, now: float) -> None:
        jitter = self.scenario.signals.probe_jitter_ms
        rtt = self.scenario.rtt(gateway.region, backend.region) + backend.probe_extra_ms
        if backend.probe_rtt_ms is not None:
            rtt = backend.probe_rtt_ms
        noisy = max(0.0, rtt + self._rng.gauss(0.0, jitter)) if jitter else rtt
        gateway.probe_rtt_ms[backend.index] = noisy
        gateway.probe_at[backend.index] = now

    def rebuild(self, now: float) -> None:
        for gateway in self.gateways:
            gateway.snapshot = self._snapshot(gateway, now)

    def _snapshot(self, gateway: GatewaySignals, now: float) -> FleetSnapshot:
        states: dict[str, BackendState] = {}
        for backend in self.backends:
            i = backend.index
            scrape = self.scrapes[i]
            counters = scrape.counters if scrape is not None else None
            metrics_at = scrape.at if scrape is not None else None
            known = [at for at in (metrics_at, gateway.probe_at[i]) if at is not None]
            ledger = gateway.ledgers[i]
            states[backend.name] = BackendState(
                spec=backend.spec,
                in_flight=gateway.in_flight[i] + gateway.others[i],
                running=None if counters is None else counters.running,
                waiting=None if counters is None else counters.waiting,
                kv_cache_usage=None if counters is None else counters.kv_cache_usage,
                rtt_ms=gateway.probe_rtt_ms[i],
                last_traffic_at=gateway.last_traffic[i],
                as_of=max(known) if known else 0.0,
                rtt_as_of=gateway.probe_at[i],
                metrics_as_of=metrics_at,
                others_uncached_per_s=ledger.uncached_per_s if self.arrivals else None,
                others_requests_per_s=ledger.requests_per_s if self.arrivals else None,
                others_in_flight=gateway.others[i] if self.shared_in_flight else None,
            )
        return FleetSnapshot(states, gateway.region, gateway.region_rtt_ms, taken_at=now)
