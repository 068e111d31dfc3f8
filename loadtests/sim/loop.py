"""The discrete-event loop: one policy, one trace, virtual time, no sleeping.

A heap holds the next time of everything that can happen: the next client arrival, a request
reaching its engine, each engine's next step boundary (``Engine.next_event_time``), a response
getting back to its gateway, signal ticks and timed events. Engines are advanced only at their
own event times, so at any popped time every engine's state is current.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from loadtests.emulator.engine import EventKind, SequenceRequest
from loadtests.sim.collector import collector_for_a_run
from loadtests.sim.fleet import SimBackend, build_fleet
from loadtests.sim.oracle import EngineTruth
from loadtests.sim.path_delays import PathDelays
from loadtests.sim.results import PolicyRun, ResultColumns
from loadtests.sim.scenario import PathDelay, Scenario, Slowdown
from loadtests.sim.shared_in_flight import SharedInFlight
from loadtests.sim.shared_prefixes import SharedPrefixes
from loadtests.sim.shared_samples import SharedSamples
from loadtests.sim.signal_schedule import SignalSchedule
from loadtests.sim.signals import SignalModel
from loadtests.sim.step_ticks import StepTicks
from loadtests.sim.trace import Trace, TraceRequest
from routing.deadline import unmeetable
from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from routing.types import (
    Decision,
    FirstToken,
    Observation,
    RequestProfile,
    Router,
    first_token_observer,
)

ARRIVAL, SUBMIT, WAKE, RETURN, BACKGROUND, TICK, SLOW, RESTORE, FIRST, DELAY, UNDELAY = range(11)
SIGNAL = 11  # one backend's scrape or probe on its own schedule (signal_schedule.py)
SHARE = 12  # a decision's prompt blocks reach another gateway (shared_prefixes.py)
LEARN = 13  # a first token one gateway learned from reaches another (shared_samples.py)
FLIGHT = 14  # a change of one gateway's open requests reaches another (shared_in_flight.py)
REJECT_SUFFIX = "+reject"


@runtime_checkable
class Releasing(Protocol):
    """A router whose reservation a request that never reaches a backend gives back."""

    def release(self, backend: str) -> None: ...


@dataclass(slots=True)
class _Open:
    """A routed request between its decision and the response's last byte at the gateway."""

    request: TraceRequest
    backend: int
    one_way_s: float
    hashes: tuple[int, ...]
    predicted_ms: float | None
    terms_ms: dict[str, float]
    first_at: float = math.nan
    cached: int = 0
    first_seen: bool = False  # the router learned the TTFT at the first token


class Simulation:
    def __init__(self, scenario: Scenario, trace: Trace, policy: str) -> None:
        self.scenario = scenario
        self.trace = trace
        self.run_name = policy
        # "<policy>+reject": the same policy with early rejection of unmeetable deadlines.
        self.policy = policy.removesuffix(REJECT_SUFFIX)
        self.reject = policy.endswith(REJECT_SUFFIX)
        self.backends = build_fleet(scenario)
        self.by_name = {b.name: b for b in self.backends}
        self._truths = [EngineTruth(scenario, region, self.by_name) for region in trace.gateways]
        self.signals = SignalModel(scenario, self.backends, trace.gateways)
        self._schedule = SignalSchedule(scenario.signals, self.backends, scenario.seed)
        self.routers = [self._router(i, region) for i, region in enumerate(trace.gateways)]
        self._shared = SharedPrefixes(scenario, trace.gateways, self.routers)
        self._samples = SharedSamples(scenario, trace.gateways, self.routers)
        self._flights = SharedInFlight(scenario, trace.gateways, self.signals)
        self._ticks = StepTicks(
            [getattr(router, "step_clock", None) for router in self.routers],
            [b.name for b in self.backends], self._one_way_s,
        )  # fmt: skip
        self._paths = PathDelays(scenario.events, self.by_name, self._ticks)
        self.results = ResultColumns(len(trace), len(self.backends))
        self._requests = trace.requests()
        self._upcoming: TraceRequest | None = next(self._requests, None)
        self._heap: list[tuple[float, int, int, int]] = []
        self._order = 0
        self._wake_at = [math.inf] * len(self.backends)
        self._open: dict[int, _Open] = {}
        self._by_region = {r: [b for b in self.backends if b.region == r] for r in scenario.regions}
        self._warm_up_id = -1 - len(trace.background)  # below the background loads' ids
        self._handlers: dict[int, Callable[[float, int], None]] = {
            ARRIVAL: self._arrival, SUBMIT: self._submit, WAKE: self._wake,
            RETURN: self._return, BACKGROUND: self._background, TICK: self._tick,
            SLOW: self._slow, RESTORE: self._restore, FIRST: self._first,
            DELAY: self._paths.start, UNDELAY: self._paths.end, SIGNAL: self._signal,
            SHARE: self._shared.deliver, LEARN: self._samples.deliver,
            FLIGHT: self._flights.deliver,
        }  # fmt: skip

    def _router(self, index: int, region: str) -> Router:
        # The simulator never falls back to a second candidate, so one is all it needs.
        params = {"max_ranked": 1, **self.scenario.policy_params.get(self.policy, {})}
        truth = EngineTruth(self.scenario, region, self.by_name)
        seed = self.scenario.seed * 7919 + index
        return build_router(self.policy, params, seed, oracle_truth=truth)

    def _push(self, at: float, kind: int, ref: int) -> None:
        self._order += 1
        heapq.heappush(self._heap, (at, self._order, kind, ref))

    def run(self) -> PolicyRun:
        background = self.trace.background
        if self._upcoming is not None:
            self._push(self._upcoming.at, ARRIVAL, 0)
        if background:
            self._push(background[0].at, BACKGROUND, 0)
        self._push(0.0, TICK, 0)
        for at, ref in self._schedule.first() if self._schedule.active else ():
            self._push(at, SIGNAL, ref)
        for i, event in enumerate(self.scenario.events):
            if isinstance(event, Slowdown):
                self._push(event.start_s, SLOW, i)
                self._push(event.end_s, RESTORE, i)
            elif isinstance(event, PathDelay):
                self._push(event.start_s, DELAY, i)
                if event.end_s <= self.trace.span_s:  # else for good
                    self._push(event.end_s, UNDELAY, i)
        heap, handlers = self._heap, self._handlers
        with collector_for_a_run():
            while heap:
                at, _, kind, ref = heapq.heappop(heap)
                handlers[kind](at, ref)
        return PolicyRun(self.run_name, self.results, self.backends)

    # -- requests ---------------------------------------------------------------------------

    def _arrival(self, now: float, i: int) -> None:
        request = self._upcoming
        assert request is not None and request.id == i
        self._upcoming = upcoming = next(self._requests, None)
        if upcoming is not None:
            self._push(upcoming.at, ARRIVAL, i + 1)
        self.results.arrived(i, request.prompt_tokens, request.long_form)
        self.results.arrived_at[i] = now
        gateway = self.signals.gateways[request.gateway]
        hashes = request.hashes
        deadline = request.deadline_ms
        profile = RequestProfile(
            model=self.scenario.model, tenant=request.tenant, origin=request.origin,
            prompt_tokens=request.prompt_tokens, prefix_hashes=hashes,
            max_tokens=request.max_tokens, latency_class=request.latency_class,
            ttft_objective_ms=request.ttft_objective_ms,
            deadline_s=None if deadline is None else deadline / 1000.0,
        )  # fmt: skip
        self.results.objectives(i, request.ttft_objective_ms, deadline)
        decision = self.routers[request.gateway].decide(profile, gateway.snapshot, now)
        chosen = decision.chosen
        if chosen is None:
            self.results.rejected(i)
            return
        self.results.explorations += decision.explored
        self.results.explored[i] = decision.explored
        refusing = self.reject and deadline is not None
        if refusing and self._refuse(i, request.gateway, decision, profile, now):
            return
        backend = self.by_name[chosen.backend]
        one_way = (
            self.scenario.rtt(gateway.region, backend.region) + backend.path_extra_ms
        ) / 2000.0
        self._open[i] = _Open(
            request, backend.index, one_way, hashes, chosen.predicted_ttft_ms,
            dict(chosen.terms_ms),
        )  # fmt: skip
        predicted = chosen.predicted_ttft_ms
        if predicted is None and self.policy == "oracle" and not request.long_form:
            predicted = chosen.score  # the oracle's truth: reported to show its own accuracy
        self.results.routed(i, backend.index, predicted, chosen.predicted_ttft_p90_ms)
        gateway.sent(backend.index, now, request.prompt_tokens)
        self._in_flight_moved(request.gateway, backend.index, +1, now)
        self._push(now + one_way, SUBMIT, i)
        for at, ref in self._shared.published(request.gateway, backend.name, hashes, now):
            self._push(at, SHARE, ref)

    def _refuse(
        self, i: int, gateway: int, decision: Decision, profile: RequestProfile, now: float
    ) -> bool:
        """Early rejection, as the gateway's relay does it; records whether the request would
        have met its deadline had it been sent to the chosen backend (the oracle's truth)."""
        assert profile.deadline_s is not None and decision.chosen is not None
        deadline_ms = profile.deadline_s * 1000.0
        if unmeetable(decision, deadline_ms, self.scenario.early_rejection_quantile) is None:
            return False
        router = self.routers[gateway]
        if isinstance(router, Releasing):  # a PipelineRouter, or a replay's wrapper of one
            router.release(decision.chosen.backend)
        truth = self._truths[gateway].latency_ms(decision.chosen.backend, profile, now)
        self.results.refuse(i, truth is not None and truth <= deadline_ms)
        return True

    def _submit(self, now: float, i: int) -> None:
        state = self._open[i]
        request = state.request
        backend = self.backends[state.backend]
        self._count_cold(backend, now)
        hashes = request.engine_hashes or state.hashes
        backend.engine.submit(
            SequenceRequest(i, request.prompt_tokens, request.max_tokens, hashes), now
        )
        self._touched(backend, now)

    def _background(self, now: float, k: int) -> None:
        background = self.trace.background
        if k + 1 < len(background):
            self._push(background[k + 1].at, BACKGROUND, k + 1)
        load = background[k]
        region = self._by_region[load.region]
        if not region:
            return
        backend = region[load.slot % len(region)]
        self._count_cold(backend, now)
        backend.engine.submit(SequenceRequest(-1 - k, load.prompt_tokens, load.max_tokens), now)
        self._touched(backend, now)

    def _count_cold(self, backend: SimBackend, now: float) -> None:
        self.results.cold_starts += backend.engine.is_cold(now)

    def _warm_ups(self, now: float) -> None:
        """Each gateway's router names the serverless backends it keeps warm that need a
        warm-up now (routing.prewarm); each gets a one-token request, sent at once (a warm-up
        is tiny, and a few ms of its trip changes nothing the router sees)."""
        for gateway, router in zip(self.signals.gateways, self.routers, strict=True):
            if not isinstance(router, PipelineRouter):
                continue
            for name in router.warm_up(gateway.snapshot, now):
                backend = self.by_name[name]
                self.results.warm_ups += 1
                self._count_cold(backend, now)
                backend.engine.submit(SequenceRequest(self._warm_up_id, 1, 1), now)
                self._warm_up_id -= 1
                self._touched(backend, now)

    def _serverless_time(self, now: float, step: float) -> None:
        for backend in self.backends:
            if backend.engine.params.idle_timeout_s is not None:
                self.results.serverless_s += step
                self.results.serverless_warm_s += step * (not backend.engine.is_cold(now))

    def _touched(self, backend: SimBackend, now: float) -> None:
        backend.version += 1
        at = backend.engine.next_event_time()
        if at is not None and at != self._wake_at[backend.index]:
            at = max(at, now)
            self._wake_at[backend.index] = at
            self._push(at, WAKE, backend.index)

    def _wake(self, now: float, b: int) -> None:
        if self._wake_at[b] != now:
            return  # superseded by a later reschedule
        self._wake_at[b] = math.inf
        backend = self.backends[b]
        events = backend.engine.advance(now)
        ticks = self._ticks
        if ticks.active:
            ticks.ended(b, backend.engine.last_step_end)
        for event in events:
            if event.seq_id < 0:
                continue
            state = self._open[event.seq_id]
            if event.kind is EventKind.FIRST_TOKEN:
                state.first_at, state.cached = event.time, event.cached_tokens
                self._push(max(event.time + state.one_way_s, now), FIRST, event.seq_id)
                if ticks.active:
                    ticks.streaming(state.request.gateway, b, 1)
            elif event.kind is EventKind.FINISHED:
                if ticks.active:
                    ticks.streaming(state.request.gateway, b, -1)
                self.results.finished(event.seq_id, event.time, event.tokens)
                self._push(event.time + state.one_way_s, RETURN, event.seq_id)
        self._touched(backend, now)

    def _one_way_s(self, gateway: int, b: int) -> float:
        backend = self.backends[b]
        region = self.signals.gateways[gateway].region
        return (self.scenario.rtt(region, backend.region) + backend.path_extra_ms) / 2000.0

    def _first(self, now: float, i: int) -> None:
        """The first token reaches the gateway: the router learns the TTFT now, as the
        gateway's relay does, not at the end of the stream."""
        state = self._open[i]
        router = first_token_observer(self.routers[state.request.gateway])
        if router is not None:
            request = state.request
            first = FirstToken(
                self.backends[state.backend].name, now,
                1000.0 * (state.first_at + state.one_way_s - request.at),
                state.terms_ms, request.prompt_tokens, state.cached,
                predicted_ttft_ms=state.predicted_ms,
            )  # fmt: skip
            router.observe_first_token(first)
            state.first_seen = True
            for at, ref in self._samples.published(request.gateway, first, now):
                self._push(at, LEARN, ref)

    def _return(self, now: float, i: int) -> None:
        state = self._open.pop(i)
        request = state.request
        ttft_ms = 1000.0 * (state.first_at + state.one_way_s - request.at)
        output = self.results.output_tokens[i]
        gen_ms = 1000.0 * (self.results.finish_at[i] - state.first_at)
        itl_ms = gen_ms / (output - 1) if output > 1 else None
        self.results.returned(i, ttft_ms, 1000.0 * (now - request.at), state.cached)
        price = self.backends[state.backend].spec.price
        if price is not None:
            cached = min(state.cached, request.prompt_tokens)
            self.results.cost[i] = price.tokens_cost(
                request.prompt_tokens - cached, cached, int(output)
            )
        self.signals.gateways[request.gateway].done(state.backend, now, state.cached)
        self._in_flight_moved(request.gateway, state.backend, -1, now)
        self.routers[request.gateway].observe(
            Observation(
                backend=self.backends[state.backend].name, at=now, ok=True,
                prompt_tokens=request.prompt_tokens, cached_tokens=state.cached,
                output_tokens=int(output), ttft_ms=ttft_ms, itl_ms=itl_ms,
                predicted_ttft_ms=state.predicted_ms, prefix_hashes=state.hashes,
                tenant=request.tenant, predicted_terms_ms=state.terms_ms,
                first_token_observed=state.first_seen,
            )
        )  # fmt: skip

    def _in_flight_moved(self, gateway: int, backend: int, delta: int, now: float) -> None:
        for at, ref in self._flights.published(gateway, backend, delta, now):
            self._push(at, FLIGHT, ref)

    # -- signals and timed events ---------------------------------------------------------------

    def _tick(self, now: float, n: int) -> None:
        """Signal ticks on the snapshot interval; scrapes and probes on multiples of it."""
        signals = self.scenario.signals
        step = signals.snapshot_interval_s
        every_scrape = max(1, round(signals.scrape_interval_s / step))
        every_probe = max(1, round(signals.probe_interval_s / step))
        on_tick = not self._schedule.active and now >= signals.signals_after_s
        if on_tick and n % every_probe == 0:
            self.signals.probe(now)
        if on_tick and n % every_scrape == 0:
            self.signals.scrape(now)
        self.signals.rebuild(now)
        self._warm_ups(now)
        self._serverless_time(now, step)
        if now < self.trace.span_s:
            self._push((n + 1) * step, TICK, n + 1)

    def _signal(self, now: float, ref: int) -> None:
        following = self._schedule.fire(ref, now, self.signals)
        if now < self.trace.span_s:
            self._push(following, SIGNAL, ref)

    def _slow(self, now: float, i: int) -> None:
        event = self.scenario.events[i]
        assert isinstance(event, Slowdown)
        for backend in self._by_region[event.region]:
            backend.slow_down(event.factor)

    def _restore(self, now: float, i: int) -> None:
        event = self.scenario.events[i]
        assert isinstance(event, Slowdown)
        for backend in self._by_region[event.region]:
            backend.restore()


def simulate(scenario: Scenario, trace: Trace, policy: str) -> PolicyRun:
    return Simulation(scenario, trace, policy).run()
