"""Walk the routing decision until one upstream produces a first token.

Before the first token nothing has been sent to the client, so any failure — refused, reset,
timed out, 429, 5xx, an error event, malformed or empty — moves on to the next ranked
candidate (optionally hedging: starting the next one while the first is still slow), within
the request's deadline, the attempt limit and the retry budget, skipping backends whose
``Retry-After`` has not passed. Client errors the backend reports (400, 413, 422) are the
client's to fix and go back unchanged. If every attempt fails, the client gets one honest error
status, never a 200 with an empty stream.

The relay also admits (bounded queues per model and tenant) *before* routing — a request
waiting in the queue holds no backend reservation and is routed on the snapshot of the moment
it is admitted — refuses while draining, and swaps
its whole configuration atomically on reload (:meth:`Relay.swap`); a request keeps the
:class:`RelayState` it started on until :meth:`Relay.finish`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from functools import partial

from gateway.attempt import AttemptContext, AttemptFailure
from gateway.chain import relay_hooks as chain
from gateway.chain.hop import HopContext
from gateway.config import GatewayConfig
from gateway.drain import DrainState, draining_error
from gateway.ended_observation import observation_of
from gateway.errors import ApiError, no_backend, upstream_failed
from gateway.hedging import ObservedTtft
from gateway.inbound import InboundRequest
from gateway.lifecycle.handles import hold_request
from gateway.lifecycle.live import LiveRequests
from gateway.lifecycle.states import Event, State
from gateway.metrics import GatewayMetrics
from gateway.model_names import ModelNames
from gateway.objectives import ObjectiveMetrics
from gateway.observability.observer import RequestObserver
from gateway.observability.record import RequestRecord
from gateway.opened_stream import OpenedStream
from gateway.placement import UNRESTRICTED
from gateway.placement import resolve as resolve_placement
from gateway.prediction_timing import PreparedEntries
from gateway.relay_state import HubMetrics, RelayState
from gateway.reliability_metrics import ReliabilityMetrics
from gateway.retry_budget import RetryAfterTable
from gateway.signals.hub import SignalHub
from gateway.signals.outlier import FailureKind
from gateway.step_feed import on_routing_clock, step_ticker
from gateway.timing import TimingEntry, insert_after
from gateway.upstream import UpstreamPool
from gateway.walk import CandidateWalk, walk_hedged, walk_in_turn
from routing.reservation import decide
from routing.types import (
    FirstToken,
    PolicyRouter,
    RequestProfile,
    first_token_observer,
)

log = logging.getLogger("meridian.relay")


class Relay:
    def __init__(self, state: RelayState, metrics: GatewayMetrics) -> None:
        self._state = state
        self.metrics = metrics
        self.safety = ReliabilityMetrics(metrics.registry)
        self.drain = DrainState()
        self.retry_after = RetryAfterTable(state.config.retry.max_retry_after_s)
        self.observed_ttft = ObservedTtft()  # the hedge delay for policies that predict none
        self._hub_metrics = HubMetrics(state.hub_registry)
        self.objective_metrics = ObjectiveMetrics(metrics.registry)
        metrics.registry.register(self._hub_metrics)
        self.observer = RequestObserver(state.config, metrics)
        self.live = LiveRequests()  # every request the core holds now, and where it is

    # -- the current configuration's parts (swapped whole by a reload) -------------------

    @property
    def state(self) -> RelayState:
        return self._state

    @property
    def config(self) -> GatewayConfig:
        return self._state.config

    @property
    def pool(self) -> UpstreamPool:
        return self._state.pool

    @property
    def router(self) -> PolicyRouter:
        return self._state.router

    @property
    def fleet(self) -> SignalHub:
        return self._state.fleet

    @property
    def known_models(self) -> ModelNames:
        return self._state.known_models

    def swap(self, state: RelayState) -> RelayState:
        """Make ``state`` current for new requests; returns the one it replaced."""
        old, self._state = self._state, state
        self._hub_metrics.current = state.hub_registry
        self.retry_after.max_wait_s = state.config.retry.max_retry_after_s
        self.observer.configure(state.config)
        return old

    # -- one request ---------------------------------------------------------------------

    def place(self, profile: RequestProfile) -> RequestProfile:
        """The profile with the placement policy (residency, region preferences) applied."""
        placement = resolve_placement(self._state.config.placement, profile.tenant, profile.origin)
        if placement is UNRESTRICTED:
            return profile
        return replace(
            profile,
            allowed_regions=placement.allowed_regions,
            region_penalty_ms=placement.region_penalty_ms,
        )

    async def open(
        self, inbound: InboundRequest, forward_headers: dict[str, str], door: str = "http"
    ) -> OpenedStream:
        record = self.observer.start(inbound, door)
        try:
            opened = await self._open(inbound, forward_headers, record)
        except BaseException as exc:
            self.observer.open_failed(record, exc)
            raise
        opened.record = record
        # TTFT metrics and first-token learning wait until the door's first write is out (the
        # door writes before it next awaits anything); finish() runs them if they are left.
        opened.after_first_byte.append(partial(self.observer.opened, record, opened))
        asyncio.get_running_loop().call_soon(opened.catch_up)
        return opened

    async def _open(
        self, inbound: InboundRequest, forward_headers: dict[str, str], record: RequestRecord
    ) -> OpenedStream:
        if self.drain.refusing:
            raise draining_error()
        state = self._state
        hop, inbound, forward_headers = chain.enter(
            state.fleet, state.config.chain.max_hops, inbound, forward_headers
        )
        record.hop = hop = self.observer.enter(hop, forward_headers)
        policy = state.policy(inbound.profile.latency_class)
        deadline = inbound.received_at + policy.total_s
        timer = asyncio.timeout(deadline - time.perf_counter())
        held = hold_request(state, self.drain, timer, inbound.request_id, self.live)
        record.lifecycle = held.lifecycle
        walk: CandidateWalk | None = None
        try:
            async with timer:
                # Admission before routing: a request waiting in the queue holds no backend
                # reservation, and is routed on the snapshot of the moment it is admitted.
                queued_at = time.perf_counter()
                await held.admit(state.admission, inbound.model, inbound.tenant)
                record.queue_s = time.perf_counter() - queued_at
                walk = record.walk = self._route(state, inbound, forward_headers, hop, record)
                held.on(Event.ROUTED)
                walk.events = held.on  # attempts started and failed, hedges included
                hedging = policy.hedging
                won = await (
                    walk_hedged(walk, hedging, self.observed_ttft)
                    if hedging.enabled
                    else walk_in_turn(walk)
                )
            if won is None:
                held.on(Event.ALL_ATTEMPTS_FAILED)
                raise self._final_error(walk, inbound)
        except BaseException as exc:
            if walk is not None:
                walk.abandon()
                self._count_extra(walk)
            held.end_with(_ending_before_first_token(held.lifecycle.state, exc, self.drain))
            held.end()
            if isinstance(exc, TimeoutError) and timer.expired():
                error = draining_error() if self.drain.expired else self._final_error(walk, inbound)
                raise error from None
            if isinstance(exc, ApiError) and exc.code in ("tenant_over_limit", "model_overloaded"):
                self.safety.admission_refused.labels(str(exc.status)).inc()
            raise
        opened, number = won
        record.winner = number
        opened.held, opened.exchange.deadline = held, deadline
        opened.exchange.tick = step_ticker(state.router, opened.route.backend)
        held.streaming(opened)
        self._count_extra(walk)
        decision = walk.decision
        self._stamp(opened, walk, number, record.route_ms or 0.0, decision.policy)
        opened.entries.extend(walk.ctx.prepared.objectives())
        opened.hop = hop
        chain.stamp(opened.entries, hop, opened.route.backend)
        return opened

    def _route(
        self,
        state: RelayState,
        inbound: InboundRequest,
        forward_headers: dict[str, str],
        hop: HopContext,
        record: RequestRecord,
    ) -> CandidateWalk:
        """Decide on a fresh snapshot; the walk over the ranked candidates, holding the first
        choice's reservation. Raises the refusal when there is no candidate, or none in time."""
        started = record.route_started = time.perf_counter()
        profile = self.place(inbound.profile)
        decision, first = decide(state.router, profile, state.fleet.snapshot(), time.monotonic())
        route_ms = record.route_ms = (time.perf_counter() - started) * 1000.0
        # Observed once the request is out (the loop's next turn): not before the upstream write.
        asyncio.get_running_loop().call_soon(self.metrics.route_decision.observe, route_ms / 1e3)
        if decision.explored:  # the exploration budget at work (routing.exploration)
            self.metrics.explorations.labels(decision.ranked[0].backend).inc()
        if not decision.ranked:
            reports = state.fleet.downstream_reports()
            if (loop := chain.refusal(decision, hop, reports, inbound.model)) is not None:
                raise loop
            reasons = "; ".join(f"{r.backend}: {r.reason}" for r in decision.rejected)
            raise no_backend(f"no backend can serve model '{inbound.model}' now ({reasons})", 1)
        metrics = self.objective_metrics  # early rejection: before any upstream work
        if refused := metrics.refusal(
            decision, profile, state.config.objectives, inbound.received_at
        ):
            if first is not None:
                first.release()
            raise refused
        state.budget.on_request()
        policy = state.policy(inbound.profile.latency_class)
        prepared = PreparedEntries(decision, profile)
        ctx = AttemptContext(
            state, self.metrics, inbound, forward_headers, policy, prepared, record.door == "grpc"
        )
        limit = state.config.limits.max_attempts
        return CandidateWalk(ctx, decision, profile, first, limit, self.retry_after)

    def _count_extra(self, walk: CandidateWalk) -> None:
        if walk.launched > 1:
            retries = walk.launched - 1 - walk.hedges
            self.safety.extra_attempts.labels("retry").inc(retries)
            self.safety.extra_attempts.labels("hedge").inc(walk.hedges)
        if walk.budget_denied:
            self.safety.retry_budget_denied.inc()

    def _stamp(
        self, opened: OpenedStream, walk: CandidateWalk, number: int, route_ms: float, policy: str
    ) -> None:
        """Route header and timing entries of the winning attempt."""
        inbound = walk.ctx.inbound
        now = time.perf_counter()
        ttft_ms = (now - inbound.received_at) * 1000.0
        # The first token's wait for a busy loop (gateway/read_lag.py) is the gateway's time.
        upstream_ms = (now - walk.records[0].started_at) * 1000.0 - opened.upstream_read_lag_ms
        gw_ms = max(0.0, ttft_ms - upstream_ms)
        route, launched = opened.route, walk.launched
        if route.attempts != launched or route.hedges != walk.hedges:  # else it says so already
            opened.route = replace(route, attempts=launched, hedges=walk.hedges)
        opened.entries[:0] = [TimingEntry("gw", gw_ms), TimingEntry("route", route_ms, policy)]
        insert_after(opened.entries, "upstream_ttfb", TimingEntry("ttft", ttft_ms))
        opened.entries.extend(walk.timing_entries(number, now))
        opened.entries.extend(walk.ctx.prepared.prediction(opened))
        name, later = opened.route.backend, opened.after_first_byte  # after the first write
        if opened.upstream_ttfb_ms is not None:
            later.append(partial(self.observed_ttft.record, name, opened.upstream_ttfb_ms))
            if inbound.stream:  # a whole non-streaming body is not a time to first token
                later.append(partial(self._learn_first_token, opened, inbound))
        later.append(partial(self.metrics.overhead.observe, gw_ms / 1000.0))  # TTFT: observer

    def _learn_first_token(self, opened: OpenedStream, inbound: InboundRequest) -> None:
        """Teach routing this TTFT now, not at the end of the stream: a backlog building up
        on a backend shows seconds earlier."""
        router = first_token_observer((opened.state or self._state).router)
        if router is None or opened.upstream_ttfb_ms is None:
            return
        arrived = opened.exchange.stats.first_token_at  # its wait to be read was ours (read_lag)
        if arrived is not None:
            arrived -= opened.upstream_read_lag_ms / 1000.0
        router.observe_first_token(
            FirstToken(
                opened.route.backend,
                on_routing_clock(arrived),
                opened.upstream_ttfb_ms,
                opened.predicted_terms_ms,
                inbound.profile.prompt_tokens,
                predicted_ttft_ms=opened.route.predicted_ttft_ms,
            )
        )
        opened.first_token_observed = True

    def _final_error(self, walk: CandidateWalk | None, inbound: InboundRequest) -> ApiError:
        if walk is None or not walk.failures:  # None: the deadline passed in the admission queue
            if walk is not None and walk.skipped_wait_s is not None:
                message = (
                    f"every backend for model '{inbound.model}' asked for a pause "
                    f"(Retry-After); the next may be tried in {walk.skipped_wait_s:.1f}s"
                )
                return no_backend(message, walk.skipped_wait_s)
            return ApiError(
                504,
                "request deadline passed before any backend answered",
                "server_error",
                "deadline_exceeded",
            )
        failures = walk.failures
        summary = "; ".join(f"{f.backend}: {f.kind} ({f.message})" for f in failures)
        budget = " (retry budget spent)" if walk.budget_denied else ""
        message = f"all {len(failures)} attempts for model '{inbound.model}' failed{budget}: "
        message += summary
        return _error_for(failures, message)

    def finish(
        self,
        inbound: InboundRequest,
        opened: OpenedStream,
        now: float,
        failure: FailureKind | None = None,
        error: str | None = None,
    ) -> None:
        """Book-keeping once the client's response is over, or abandoned (``failure``;
        ``error`` is the kind of a stream that broke, for the request log). Every resource the
        request holds is released here, by its :class:`RequestHold`, once (the ending event's
        transition: the upstream response, the winner's counts, admission, state, drain)."""
        opened.catch_up()  # the first-token bookkeeping, if the loop has not run it yet
        if opened.held is None:  # not one of the relay's own (no request hold): just close it
            opened.close()
        record, opened.record = opened.record, None  # one line per request, however called
        state = opened.state or self._state
        # An abandoned request says nothing about the backend: released, not learned from.
        learned = (
            None if failure is FailureKind.CANCELLED else observation_of(inbound, opened, failure)
        )
        if opened.held is not None:
            opened.held.end(failure, learned, error)
        if record is not None:  # after the ending: the line says the state it ended in
            self.observer.finished(record, opened, now, failure, error)
        # tokens, e2e and ITL metrics: the observer
        self.objective_metrics.finish(inbound, opened, state.config.objectives)


def _ending_before_first_token(state: State, exc: BaseException, drain: DrainState) -> Event:
    """The lifecycle event of a request that ended with ``exc`` before its first token."""
    if isinstance(exc, TimeoutError):
        return Event.DRAINED if drain.expired else Event.DEADLINE
    if isinstance(exc, ApiError):
        if state is State.ACCEPTED:
            return Event.REFUSED  # admission full
        if state is State.ADMITTED:
            return Event.NO_BACKEND  # no candidate, a loop, or none in time
        if state is State.AWAITING_FIRST_TOKEN:
            return Event.REJECTED  # a backend said the request itself is bad
    if isinstance(exc, asyncio.CancelledError):
        return Event.CLIENT_GONE
    return Event.INTERNAL


def _error_for(failures: list[AttemptFailure], message: str) -> ApiError:
    retry_afters = [f.retry_after_s for f in failures if f.retry_after_s is not None]
    retry_after = min(retry_afters) if retry_afters else None
    if all(f.kind == "unserved" for f in failures):  # no candidate serves this API
        if all(f.status == 404 for f in failures):
            return ApiError(404, message, "invalid_request_error", "not_served")
        return ApiError(501, message, "server_error", "not_implemented")
    if all(f.status == 429 for f in failures):
        return upstream_failed(message, 429, retry_after or 1.0)
    if all(f.kind == "timeout" for f in failures):
        return ApiError(504, message, "server_error", "upstream_timeout")
    if all(f.kind == "connect" or f.status == 503 for f in failures):
        return no_backend(message, retry_after or 1.0)
    return upstream_failed(message, 502, retry_after)
