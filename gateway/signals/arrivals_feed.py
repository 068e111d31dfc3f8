"""Other clients' arrivals between scrapes, as this gateway can reckon them (routing.arrivals).

Per backend, one :class:`~routing.arrivals.ArrivalLedger`: this gateway's own requests and
prompt tokens as its attempts go upstream (``sent``), the cached tokens its answers report
(``answered``), and, at each new scrape, the engine's cumulative counters: prefix-cache queries
and hits (tokens) and its requests taken in (vLLM's ``request_success_total`` plus running +
waiting). What the engine took in less ours is the others' rate, which ``filled`` puts into the
backend's ``BackendState`` for the predictor to extrapolate since the scrape.

Everything here is synchronous counting (no I/O, no await): ``sent`` and ``answered`` run on the
request path, ``scraped`` in the scrape observer, ``filled`` in the snapshot rebuild. Off unless
``signals.engine_metrics.others_arrivals`` is set: then the state carries no rate (None).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from gateway.signals.engine_signals import EngineSignals
from routing.arrivals import ArrivalLedger, EngineTotals
from routing.types import BackendState


class ArrivalsFeed:
    """One ledger per backend; every method ignores a backend not in the fleet."""

    def __init__(self, backends: Iterable[str], enabled: bool) -> None:
        self.enabled = enabled
        self._ledgers = {name: ArrivalLedger() for name in backends} if enabled else {}
        self._scraped_at: dict[str, float] = {}

    def sent(self, backend: str, prompt_tokens: int) -> None:
        """One of our attempts with ``prompt_tokens`` went upstream to ``backend``."""
        ledger = self._ledgers.get(backend)
        if ledger is not None:
            ledger.sent(prompt_tokens)

    def answered(self, backend: str, cached_tokens: int | None) -> None:
        """An answer from ``backend`` reported ``cached_tokens`` (None: it did not say)."""
        ledger = self._ledgers.get(backend)
        if ledger is not None and cached_tokens is not None:
            ledger.hit(cached_tokens)

    def scraped(self, backend: str, signals: EngineSignals) -> None:
        """A scrape of ``backend`` (the same one twice counts once: a replica not leading the
        backend's lease hands back its last)."""
        ledger = self._ledgers.get(backend)
        counters = signals.prefix_counters
        if ledger is None or counters is None or self._scraped_at.get(backend) == signals.as_of:
            return
        self._scraped_at[backend] = signals.as_of
        parts = (signals.requests_finished, signals.running, signals.waiting)
        arrived = None if None in parts else sum(p for p in parts if p is not None)
        ledger.scraped(EngineTotals(signals.as_of, counters.queries, counters.hits, arrived))

    def filled(self, state: BackendState) -> BackendState:
        """``state`` with the others' rates in (unchanged when off or not measured yet)."""
        ledger = self._ledgers.get(state.spec.name)
        if ledger is None:
            return state
        uncached, requests = ledger.uncached_per_s, ledger.requests_per_s
        if uncached is None and requests is None:
            return state
        return dataclasses.replace(
            state, others_uncached_per_s=uncached, others_requests_per_s=requests
        )
