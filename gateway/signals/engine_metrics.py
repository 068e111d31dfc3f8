"""Scrape each backend's Prometheus endpoint in the background; read the latest synchronously.

Backends whose engine has no name mapping (``Engine.UNKNOWN``: hosted APIs and the like) are
never scraped; routing falls back to passive signals for them. Every scrape is bounded in
time (``timeout_s``) and size (``max_bytes``, enforced while reading). A failing scrape keeps
the last good signals (their ``as_of`` ages, and the predictor widens its spread with age),
is counted, and is logged once per change of state. A scrape whose deadline passed while the
gateway's own loop was too busy to look (``lagged``, gateway/lag_timeout.py) is counted in the
metrics only: it says nothing about the backend.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from aiohttp.abc import AbstractResolver
from pydantic import BaseModel, ConfigDict, Field

from gateway.lag_timeout import NOT_THE_BACKENDS, judged_timeout
from gateway.signals.engine_signals import EngineSignals, is_scraped, parse_engine_page
from gateway.signals.errors import ErrorTransitions, SignalError, SignalErrorKind, is_lagged
from gateway.signals.http import NO_CLIENT_TIMEOUT, classify, read_bounded
from gateway.signals.targets import BackendTarget
from gateway.signals.tasks import TaskOwner, run_periodically

logger = logging.getLogger(__name__)


class EngineMetricsConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Scrape each backend's Prometheus endpoint for queue, running and KV-cache signals.",
    )
    path: str = Field(default="/metrics", description="Path of the engine's metrics page.")
    interval_s: float = Field(
        default=2.0,
        gt=0,
        description="Seconds between scrapes of each backend (keep it at most signals.probes.interval_s).",
    )
    jitter: float = Field(
        default=0.2, ge=0, lt=1, description="Random spread of the interval, as a fraction of it."
    )
    timeout_s: float = Field(
        default=1.0,
        gt=0,
        description=(
            "A scrape taking longer fails (the last good signals are kept, ageing)."
            f" {NOT_THE_BACKENDS}"
        ),
    )
    max_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        description="Largest metrics page read; a larger one fails the scrape.",
    )
    concurrency: int = Field(
        default=8, ge=1, description="Scrapes running at once across all backends."
    )
    others_arrivals: bool = Field(
        default=False,
        description="Extrapolate other clients' arrivals (uncached prompt tokens and requests "
        "per second, from the engine's prefix-cache and finished-request counters less this "
        "gateway's own) from each scrape until the next (routing.arrivals). vLLM only. With "
        "shared state, the other replicas' requests since a scrape are counted in the "
        "backend's depth as well (routing.load), so they weigh twice here.",
    )


@dataclass(frozen=True, slots=True)
class ScrapeStatus:
    backend: str
    last_attempt_at: float
    last_error: SignalError | None
    consecutive_errors: int
    errors_total: int


class ScrapeObserver(Protocol):
    def on_scrape(
        self, backend: str, result: EngineSignals | SignalError, duration_s: float
    ) -> None: ...


class EngineMetricsScraper:
    def __init__(
        self,
        targets: Sequence[BackendTarget],
        config: EngineMetricsConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        observer: ScrapeObserver | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self._targets = [t for t in targets if is_scraped(t.engine)]
        self._resolver = resolver  # pinned backend addresses (gateway/pinning)
        self._config = config
        self._clock = clock
        self._rng = rng or random.Random()
        self._observer = observer
        self._latest: dict[str, EngineSignals] = {}
        self._status: dict[str, ScrapeStatus] = {}
        self._transitions = ErrorTransitions(logger, "metrics scrape")
        self._missing: dict[str, tuple[str, ...]] = {}  # per backend, what the page lacked
        self._tasks = TaskOwner()
        self._session: aiohttp.ClientSession | None = None
        self._semaphore = asyncio.Semaphore(config.concurrency)
        self.version = 0  # bumped on every new result; lets readers skip unchanged state

    @property
    def scraped_backends(self) -> list[str]:
        return [t.name for t in self._targets]

    def latest(self, backend: str) -> EngineSignals | None:
        return self._latest.get(backend)

    def all_latest(self) -> Mapping[str, EngineSignals]:
        return dict(self._latest)

    def status(self, backend: str) -> ScrapeStatus | None:
        return self._status.get(backend)

    async def start(self) -> None:
        if not self._config.enabled or not self._targets or self._tasks.running:
            return
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._config.concurrency, resolver=self._resolver)
        )
        for target in self._targets:
            self._tasks.spawn(
                run_periodically(
                    functools.partial(self.scrape_once, target),
                    interval_s=self._config.interval_s,
                    jitter=self._config.jitter,
                    rng=self._rng,
                    name=f"scrape:{target.name}",
                ),
                name=f"meridian-scrape-{target.name}",
            )

    async def stop(self) -> None:
        await self._tasks.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def scrape_once(self, target: BackendTarget) -> EngineSignals | SignalError:
        """Scrape one backend now and record the result; also usable without ``start``."""
        started = self._clock()
        async with self._semaphore:
            result = await self._fetch_and_parse(target)
        self._record(target.name, result, self._clock() - started)
        return result

    async def _fetch_and_parse(self, target: BackendTarget) -> EngineSignals | SignalError:
        body = await self._fetch(target)
        if isinstance(body, SignalError):
            return body
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return SignalError(SignalErrorKind.MALFORMED, f"metrics page is not UTF-8: {exc}")
        previous = self._latest.get(target.name)
        return parse_engine_page(text, target.engine, self._clock(), previous)

    async def _fetch(self, target: BackendTarget) -> bytes | SignalError:
        session = self._session
        if session is None:
            session = self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(resolver=self._resolver)
            )
        try:
            async with (
                judged_timeout(self._config.timeout_s),
                session.get(
                    target.url(self._config.path),
                    headers=dict(target.headers),
                    timeout=NO_CLIENT_TIMEOUT,
                    ssl=target.tls,
                ) as response,
            ):
                if response.status != 200:
                    return SignalError(
                        SignalErrorKind.HTTP_STATUS,
                        f"GET {self._config.path} answered HTTP {response.status}",
                    )
                return await read_bounded(response, self._config.max_bytes)
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            return classify(exc)

    def _record(self, backend: str, result: EngineSignals | SignalError, duration_s: float) -> None:
        if is_lagged(result):
            if self._observer is not None:  # no verdict: the status and the signals stand
                self._observer.on_scrape(backend, result, duration_s)
            return
        previous = self._status.get(backend)
        error = result if isinstance(result, SignalError) else None
        if isinstance(result, EngineSignals):
            self._latest[backend] = result
            self._warn_missing(backend, result)
        self._status[backend] = ScrapeStatus(
            backend=backend,
            last_attempt_at=self._clock(),
            last_error=error,
            consecutive_errors=(previous.consecutive_errors + 1 if previous else 1) if error else 0,
            errors_total=(previous.errors_total if previous else 0) + (1 if error else 0),
        )
        self._transitions.update(backend, error)
        self.version += 1
        if self._observer is not None:
            self._observer.on_scrape(backend, result, duration_s)

    def _warn_missing(self, backend: str, signals: EngineSignals) -> None:
        """One warning when a page starts lacking names its engine's current release exports
        (a renamed metric, the wrong ``engine:``), not one per scrape."""
        previous = self._missing.get(backend, ())
        self._missing[backend] = signals.missing
        if signals.missing and signals.missing != previous:
            logger.warning(
                "metrics of backend %s (engine %s) lack %s: routing treats %s as unknown; "
                "is the engine a release whose names Meridian maps (gateway/signals/"
                "engine_signals.py)?",
                backend,
                signals.engine,
                ", ".join(signals.missing),
                "it" if len(signals.missing) == 1 else "them",
            )
