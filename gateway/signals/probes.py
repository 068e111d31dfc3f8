"""Active probes: a cheap round trip per backend, and an optional 1-token canary for TTFT.

Each backend gets its own jittered loop; one semaphore bounds how many probes are in flight
across the fleet. Results land in per-backend summaries (monotonic timestamps, EWMAs, the
last error) that the request path reads synchronously.

Serverless backends are not canaried unless their target says ``keep_warm``: a canary is
real traffic, it costs money and keeps the backend from scaling to zero, which hides the cold
starts routing must plan for. A canary that found a backend cold (idle beyond its idle
timeout, or a TTFT far above the warm estimate) is recorded as a cold-start observation and
kept out of the warm-TTFT estimate.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace

import aiohttp
from aiohttp.abc import AbstractResolver

from gateway.signals.errors import ErrorTransitions, SignalError, SignalErrorKind, is_lagged
from gateway.signals.probe_config import ProbeConfig
from gateway.signals.probe_measure import (
    TimedRequest,
    canary_body,
    connect_tracing,
    timed_canary,
    timed_get,
)
from gateway.signals.probe_summary import (
    COLD_STARTS_KEPT,
    ColdStartObservation,
    ProbeObserver,
    ProbeSummary,
    ewma,
)
from gateway.signals.rtt_floor import RobustRtt, update
from gateway.signals.targets import BackendTarget
from gateway.signals.tasks import TaskOwner, run_periodically

# The summary and its observer moved to probe_summary.py; gateway/signals/hub.py still
# imports them from here.
__all__ = ["ProbeObserver", "ProbeSummary", "Prober"]

logger = logging.getLogger(__name__)


class Prober:
    def __init__(
        self,
        targets: Sequence[BackendTarget],
        config: ProbeConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        last_traffic: Callable[[str], float | None] = lambda _backend: None,
        on_traffic: Callable[[str, float], None] = lambda _backend, _at: None,
        observer: ProbeObserver | None = None,
        should_probe: Callable[[str], bool] = lambda _backend: True,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self._targets = list(targets)
        self._resolver = resolver  # pinned backend addresses (gateway/pinning)
        # Asked before every scheduled probe and canary: with shared state only the replica
        # holding a backend's lease measures it (direct probe_once/canary_once calls always run).
        self._should_probe = should_probe
        self._config = config
        self._clock = clock
        self._rng = rng or random.Random()
        self._last_traffic = last_traffic
        self._on_traffic = on_traffic
        self._observer = observer
        self._summaries = {t.name: ProbeSummary(t.name) for t in self._targets}
        self._semaphore = asyncio.Semaphore(config.concurrency)
        self._transitions = ErrorTransitions(logger, "probe")
        self._canary_transitions = ErrorTransitions(logger, "canary")
        self._tasks = TaskOwner()
        self._pooled: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self.version = 0

    def summary(self, backend: str) -> ProbeSummary | None:
        return self._summaries.get(backend)

    def summaries(self) -> Mapping[str, ProbeSummary]:
        return dict(self._summaries)

    def canaried(self, target: BackendTarget) -> bool:
        if not self._config.canary.enabled or target.model_for_canary is None:
            return False
        return target.keep_warm or not target.is_serverless

    async def start(self) -> None:
        if not self._config.enabled or self._tasks.running:
            return
        self._open_sessions()
        for target in self._targets:
            self._spawn_loop(target, "probe", self.probe_once, self._config.interval_s)
            if self.canaried(target):
                canary = self._config.canary
                self._spawn_loop(target, "canary", self.canary_once, canary.interval_s)

    async def stop(self) -> None:
        await self._tasks.stop()
        for session in (self._pooled, self._fresh):
            if session is not None:
                await session.close()
        self._pooled = self._fresh = None

    def _spawn_loop(
        self,
        target: BackendTarget,
        kind: str,
        step: Callable[[BackendTarget], Awaitable[object]],
        interval_s: float,
    ) -> None:
        loop = run_periodically(
            functools.partial(self._step_if_due, step, target),
            interval_s=interval_s,
            jitter=self._config.jitter,
            rng=self._rng,
            name=f"{kind}:{target.name}",
        )
        self._tasks.spawn(loop, name=f"meridian-{kind}-{target.name}")

    async def _step_if_due(
        self, step: Callable[[BackendTarget], Awaitable[object]], target: BackendTarget
    ) -> None:
        if self._should_probe(target.name):
            await step(target)

    def _open_sessions(self) -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
        if self._pooled is None or self._fresh is None:
            tracing = [connect_tracing()]
            pooled = aiohttp.TCPConnector(resolver=self._resolver)
            self._pooled = aiohttp.ClientSession(connector=pooled, trace_configs=tracing)
            self._fresh = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, resolver=self._resolver),
                trace_configs=tracing,
            )
        return self._pooled, self._fresh

    async def probe_once(self, target: BackendTarget) -> ProbeSummary:
        """One round-trip probe now (pooled, then fresh if configured); returns the summary."""
        pooled_session, fresh_session = self._open_sessions()
        url, headers = target.url(self._config.path), dict(target.headers)
        async with self._semaphore:
            timeout_s = self._config.timeout_s
            pooled = await timed_get(pooled_session, url, headers, timeout_s, target.tls)
            fresh: TimedRequest | SignalError | None = None
            if self._config.measure_fresh and not isinstance(pooled, SignalError):
                fresh = await timed_get(fresh_session, url, headers, timeout_s, target.tls)
        return self._record_probe(target.name, pooled, fresh)

    def _record_probe(
        self,
        backend: str,
        pooled: TimedRequest | SignalError,
        fresh: TimedRequest | SignalError | None,
    ) -> ProbeSummary:
        old = self._summaries[backend]
        if is_lagged(pooled):  # the gateway was too busy to see the answer: nothing is known
            if self._observer is not None:
                self._observer.on_probe(old, None, None, pooled)
            return old
        if is_lagged(fresh):  # the pooled round trip stands; the fresh one was not seen in time
            fresh = None
        alpha, now = self._config.ewma_alpha, self._clock()
        error = _probe_error(pooled) or _probe_error(fresh)
        failed = isinstance(pooled, SignalError) or (
            isinstance(pooled, TimedRequest) and pooled.status >= 500
        )
        pooled_ms = fresh_ms = connect_ms = None
        if isinstance(pooled, TimedRequest) and not failed:
            # A "pooled" request that had to connect is really a fresh one.
            if pooled.connect_ms is None:
                pooled_ms = pooled.total_ms
            else:
                fresh_ms, connect_ms = pooled.total_ms, pooled.connect_ms
        if isinstance(fresh, TimedRequest) and fresh.status < 500:
            fresh_ms, connect_ms = fresh.total_ms, fresh.connect_ms
        consecutive = old.consecutive_failures + 1 if failed else 0
        # Only pooled samples get the spike guard: they are what routed requests pay, and
        # fresh ones carry connect-time noise of their own.
        robust = update(RobustRtt(old.pooled_ms, old.pooled_window), pooled_ms, alpha)
        summary = replace(
            old,
            pooled_ms=robust.estimate_ms,
            pooled_window=robust.window,
            fresh_ms=ewma(old.fresh_ms, fresh_ms, alpha),
            connect_ms=ewma(old.connect_ms, connect_ms, alpha),
            last_probe_at=now,
            last_ok_at=old.last_ok_at if failed else now,
            last_error=error,
            consecutive_failures=consecutive,
            active_healthy=consecutive < self._config.unhealthy_after,
            probes_total=old.probes_total + 1,
            failures_total=old.failures_total + (1 if failed else 0),
        )
        rtt = summary.pooled_ms if summary.pooled_ms is not None else summary.fresh_ms
        summary = replace(summary, rtt_ms=rtt)
        self._publish(summary, error)
        if self._observer is not None:
            self._observer.on_probe(summary, pooled_ms, fresh_ms, error)
        return summary

    async def canary_once(self, target: BackendTarget) -> ProbeSummary:
        """One 1-token streamed generation now; classifies it as warm TTFT or a cold start."""
        model = target.model_for_canary
        if model is None:
            return self._summaries[target.name]
        pooled_session, _ = self._open_sessions()
        canary = self._config.canary
        idle_for = self._idle_for(target.name)
        async with self._semaphore:
            ttft = await timed_canary(
                pooled_session,
                target.url(canary.path),
                dict(target.headers),
                canary_body(model, canary.prompt),
                canary.timeout_s,
                target.tls,
            )
        now = self._clock()
        self._on_traffic(target.name, now)  # a canary is traffic: it keeps the backend warm
        return self._record_canary(target, ttft, idle_for, now)

    def _idle_for(self, backend: str) -> float | None:
        seen = [self._last_traffic(backend), self._summaries[backend].last_canary_at]
        known = [at for at in seen if at is not None]
        return self._clock() - max(known) if known else None

    def _record_canary(
        self, target: BackendTarget, ttft: float | SignalError, idle_for: float | None, now: float
    ) -> ProbeSummary:
        old = self._summaries[target.name]
        if is_lagged(ttft):  # no verdict: neither a canary failure nor a (lag-inflated) TTFT
            return old
        self._canary_transitions.update(
            target.name, ttft if isinstance(ttft, SignalError) else None
        )
        if isinstance(ttft, SignalError):
            summary = replace(old, last_canary_at=now, last_canary_error=ttft)
            self._publish(summary, old.last_error)
            return summary
        cold_reason = self._cold_reason(target, ttft, old.warm_ttft_ms, idle_for)
        if cold_reason is None:
            warm = ewma(old.warm_ttft_ms, ttft, self._config.ewma_alpha)
            summary = replace(old, warm_ttft_ms=warm, last_canary_at=now, last_canary_error=None)
        else:
            excess = ttft - (old.warm_ttft_ms or 0.0)
            cold = ColdStartObservation(target.name, now, ttft, excess, cold_reason)
            starts = (*old.cold_starts, cold)[-COLD_STARTS_KEPT:]
            summary = replace(old, cold_starts=starts, last_canary_at=now, last_canary_error=None)
            logger.info("canary found backend %s cold: %s", target.name, cold_reason)
        self._publish(summary, old.last_error)
        if self._observer is not None:
            self._observer.on_canary(summary, ttft, cold_reason is not None)
        return summary

    def _cold_reason(
        self, target: BackendTarget, ttft: float, warm: float | None, idle_for: float | None
    ) -> str | None:
        idle_timeout = target.spec.idle_timeout_s
        if not target.is_serverless and idle_timeout is None:
            return None  # always-on backends do not go cold; a slow answer is just slow
        if idle_timeout is not None and (idle_for is None or idle_for > idle_timeout):
            idle = "never used" if idle_for is None else f"idle {idle_for:.0f}s"
            return f"{idle} > idle timeout {idle_timeout:.0f}s"
        canary = self._config.canary
        far_above = warm is not None and ttft > canary.cold_factor * warm
        if far_above and warm is not None and ttft - warm >= canary.cold_min_excess_ms:
            return f"TTFT {ttft:.0f}ms vs warm {warm:.0f}ms"
        return None

    def _publish(self, summary: ProbeSummary, error: SignalError | None) -> None:
        self._summaries[summary.backend] = summary
        self._transitions.update(summary.backend, error)
        self.version += 1


def _probe_error(result: TimedRequest | SignalError | None) -> SignalError | None:
    if isinstance(result, SignalError):
        return result
    if result is not None and result.status >= 400:
        hint = "backend error" if result.status >= 500 else "check the probe path and headers"
        return SignalError(SignalErrorKind.HTTP_STATUS, f"probe got HTTP {result.status} ({hint})")
    return None
