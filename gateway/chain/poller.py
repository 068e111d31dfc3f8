"""Background reads of every gateway-kind backend's summary; the request path never waits.

One loop per gateway-kind backend fetches ``/v1/meridian/summary?via=<own id>`` on a jittered
schedule with a timeout, and keeps the last good report (its ``as_of`` ages, and routing widens
its spread with age; past ``drop_after_s`` it is dropped and the backend is modelled like any
other). Entries whose path already contains this gateway, or that would take more than
``max_hops`` gateways, are left out: routing over them would only be refused later.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Sequence

import aiohttp
from aiohttp.abc import AbstractResolver
from pydantic import ValidationError

from gateway.chain.config import SummaryPollConfig
from gateway.chain.report import SUMMARY_PATH, DownstreamReport, GatewaySummary
from gateway.lag_timeout import judged_timeout
from gateway.signals.errors import ErrorTransitions, SignalError, SignalErrorKind, is_lagged
from gateway.signals.http import NO_CLIENT_TIMEOUT, classify, read_bounded
from gateway.signals.targets import BackendTarget
from gateway.signals.tasks import TaskOwner, run_periodically
from routing.types import BackendKind

logger = logging.getLogger(__name__)


class SummaryPoller:
    def __init__(
        self,
        targets: Sequence[BackendTarget],
        config: SummaryPollConfig,
        *,
        own_id: str,
        max_hops: int,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        on_change: Callable[[str], None] | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self._targets = [t for t in targets if t.spec.kind is BackendKind.GATEWAY]
        self._resolver = resolver  # pinned backend addresses (gateway/pinning)
        self._config = config
        self.own_id = own_id
        self._max_hops = max_hops
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_change = on_change
        self._latest: dict[str, DownstreamReport] = {}
        self._errors: dict[str, SignalError] = {}
        self._transitions = ErrorTransitions(logger, "gateway summary poll")
        self._loops_reported: set[str] = set()
        self._tasks = TaskOwner()
        self._session: aiohttp.ClientSession | None = None

    @property
    def polled_backends(self) -> list[str]:
        return [t.name for t in self._targets]

    def latest(self, backend: str) -> DownstreamReport | None:
        """The last good report, unless it is older than ``drop_after_s``."""
        report = self._latest.get(backend)
        if report is None or self._clock() - report.as_of > self._config.drop_after_s:
            return None
        return report

    def reports(self) -> dict[str, DownstreamReport]:
        """Every current report (too old ones left out)."""
        reports = {name: self.latest(name) for name in self._latest}
        return {name: report for name, report in reports.items() if report is not None}

    def last_error(self, backend: str) -> SignalError | None:
        return self._errors.get(backend)

    def remote_ids(self) -> dict[str, str]:
        """Gateway-kind backend -> the id its gateway reported (kept even when stale: the id
        of a gateway does not age, and loop exclusion needs it most when polls fail)."""
        return {name: report.gateway_id for name, report in self._latest.items()}

    async def start(self) -> None:
        if not self._targets or self._tasks.running:
            return
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(resolver=self._resolver),
            timeout=NO_CLIENT_TIMEOUT,  # judged_timeout bounds each poll
        )
        for target in self._targets:
            self._tasks.spawn(
                run_periodically(
                    functools.partial(self.poll_once, target),
                    interval_s=self._config.interval_s,
                    jitter=self._config.jitter,
                    rng=self._rng,
                    name=f"summary:{target.name}",
                ),
                name=f"meridian-summary-{target.name}",
            )

    async def stop(self) -> None:
        await self._tasks.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def poll_once(self, target: BackendTarget) -> DownstreamReport | SignalError:
        """Fetch one summary now and record it; also usable without ``start``."""
        result = await self._fetch(target)
        if isinstance(result, GatewaySummary):
            report: DownstreamReport | SignalError = self._usable(result, self._clock())
        else:
            report = result
        self._record(target.name, report)
        return report

    async def _fetch(self, target: BackendTarget) -> GatewaySummary | SignalError:
        session = self._session
        owned = session is None
        if session is None:
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(resolver=self._resolver),
                timeout=NO_CLIENT_TIMEOUT,  # judged_timeout bounds each poll
            )
        try:
            async with judged_timeout(self._config.timeout_s):
                url = target.url(SUMMARY_PATH)
                params = {"via": self.own_id}
                headers = dict(target.headers)
                async with session.get(url, params=params, headers=headers, ssl=target.tls) as resp:
                    if resp.status != 200:
                        return SignalError(
                            SignalErrorKind.HTTP_STATUS,
                            f"summary got HTTP {resp.status} (is it a Meridian gateway?)",
                        )
                    body = await read_bounded(resp, self._config.max_bytes)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return classify(exc)
        finally:
            if owned:
                await session.close()
        if isinstance(body, SignalError):
            return body
        try:
            return GatewaySummary.model_validate_json(body)
        except ValidationError as exc:
            message = f"not a Meridian summary: {exc.errors()[0]['msg']}"
            return SignalError(SignalErrorKind.MALFORMED, message)

    def _usable(self, summary: GatewaySummary, now: float) -> DownstreamReport:
        ttft: dict[str, float] = {}
        paths: dict[str, tuple[str, ...]] = {}
        predicted = True
        for model, entry in summary.models.items():
            path = tuple(entry.path)
            if self.own_id in path or len(path) + 1 > self._max_hops:
                continue
            paths[model] = path
            if entry.ttft_ms is None:
                predicted = False
            else:
                ttft[model] = entry.ttft_ms
        return DownstreamReport(
            gateway_id=summary.gateway,
            region=summary.region,
            ttft_ms=ttft if predicted else None,
            paths=paths,
            forwards_to=frozenset(summary.forwards_to),
            as_of=now,
        )

    def _record(self, backend: str, result: DownstreamReport | SignalError) -> None:
        if is_lagged(result):
            return  # no verdict: the gateway was too busy to see the answer in time
        if isinstance(result, SignalError):
            self._errors[backend] = result
            self._transitions.update(backend, result)
            return
        self._errors.pop(backend, None)
        self._transitions.update(backend, None)
        self._latest[backend] = result
        self._warn_loop(backend, result)
        if self._on_change is not None:
            self._on_change(backend)

    def _warn_loop(self, backend: str, report: DownstreamReport) -> None:
        if report.gateway_id == self.own_id or self.own_id in report.forwards_to:
            if backend not in self._loops_reported:
                self._loops_reported.add(backend)
                logger.warning(
                    "loop configuration: gateway-kind backend %s (gateway %s) forwards back to "
                    "this gateway (%s); requests on that path are excluded or refused (508)",
                    backend,
                    report.gateway_id,
                    self.own_id,
                )
        else:
            self._loops_reported.discard(backend)
