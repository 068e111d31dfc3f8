"""Other clients' prefill arriving on a backend between two scrapes of its engine.

A scrape is a picture of the past; this router's own requests since are in its ledger
(``routing.prefilling``), but other gateways' are not: several gateways acting on the same
second-old scrape pile onto the backend it shows idle. The engine's monotonic prefix-cache
counters (vLLM's ``prefix_cache_queries_total`` and ``_hits_total``, in tokens, counted at
admission from every client) say how much uncached prompt the backend took in over the last
scrape interval; less this gateway's own uncached prompt in the same interval (its prompt
tokens sent, less the cached tokens its answers reported), that is the others' arrival rate.
Their requests also take batch slots, for seconds (their whole answer): the engine's finished
counter plus the growth of running + waiting is its arrivals, less ours the others' request
rate. :class:`ArrivalLedger` keeps one gateway's account of one backend and smooths both rates
over the last few scrape intervals, each weighted by the requests the engine saw in it: one
quiet or bursty second is not extrapolated on its own. The predictor extrapolates the rates:
the others' uncached work that arrived since the scrape and is still before its first token
(``RowTerms.arrivals``) is queued ahead, and their requests since fill the free slots first,
then queue (``RowTerms.arrival_rps``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

# Scrape intervals the rates are smoothed over (1 s scrapes: the last 3 s).
SMOOTHED_INTERVALS = 3


def _others_uncached(
    queries: float, hits: float, own_prompt: float, own_hits: float
) -> float | None:
    """Other clients' uncached prompt tokens in one interval: the growth of the engine's
    prefix-cache counters (tokens) less our own prompt tokens not found cached. None when the
    counters say nothing usable (a reset: an engine restart)."""
    if queries < 0 or hits < 0 or hits > queries:
        return None
    uncached = queries - hits
    own = max(own_prompt - min(own_hits, own_prompt), 0.0)
    return max(uncached - own, 0.0)


@dataclass(frozen=True, slots=True)
class EngineTotals:
    """One scrape of an engine's cumulative counters."""

    at: float  # when it was taken (seconds, the caller's clock)
    queries: float  # prefix-cache queries, tokens, ever
    hits: float  # prefix-cache hits, tokens, ever
    arrived: float | None = None  # requests ever: finished + running + waiting (None: unknown)


@dataclass(frozen=True, slots=True)
class _Interval:
    seconds: float
    uncached: float  # others' uncached prompt tokens
    requests: float | None  # others' requests (None: the engine does not say)
    weight: float  # every client's requests the engine saw in it


class ArrivalLedger:
    """One gateway's account of one backend: its own requests, prompt tokens and reported
    cached tokens since the last scrape, and the others' recent rates from the engine's
    counters. Feed it :meth:`sent` and :meth:`hit` as requests go and come back, and
    :meth:`scraped` on each new scrape; read :attr:`uncached_per_s`, :attr:`requests_per_s`."""

    __slots__ = ("_hits", "_last", "_prompt", "_recent", "_requests")

    def __init__(self, intervals: int = SMOOTHED_INTERVALS) -> None:
        self._requests = 0
        self._prompt = 0.0
        self._hits = 0.0
        self._last: EngineTotals | None = None
        self._recent: deque[_Interval] = deque(maxlen=max(intervals, 1))

    def sent(self, prompt_tokens: float, requests: int = 1) -> None:
        """Our ``requests`` with ``prompt_tokens`` in all reached the backend."""
        self._requests += requests
        self._prompt += prompt_tokens

    def hit(self, cached_tokens: float) -> None:
        """One of our answers from there reported ``cached_tokens`` (prompt found cached)."""
        self._hits += max(cached_tokens, 0.0)

    def scraped(self, totals: EngineTotals) -> None:
        """A new scrape: what arrived since the previous one, less ours, joins the window."""
        last, self._last = self._last, totals
        own_requests, own_prompt, own_hits = self._requests, self._prompt, self._hits
        self._requests, self._prompt, self._hits = 0, 0.0, 0.0
        if last is None:
            return
        seconds = totals.at - last.at
        uncached = _others_uncached(
            totals.queries - last.queries, totals.hits - last.hits, own_prompt, own_hits
        )
        arrived = None
        if totals.arrived is not None and last.arrived is not None:
            arrived = totals.arrived - last.arrived
        if seconds <= 0 or uncached is None or (arrived is not None and arrived < 0):
            self._recent.clear()  # a reset (the engine restarted) or an unreadable interval
            return
        requests = None if arrived is None else max(arrived - own_requests, 0.0)
        weight = seconds if arrived is None else arrived
        self._recent.append(_Interval(seconds, uncached, requests, weight))

    @property
    def uncached_per_s(self) -> float | None:
        """Others' uncached prompt tokens per second (None: no interval measured yet)."""
        return self._smoothed(lambda interval: interval.uncached)

    @property
    def requests_per_s(self) -> float | None:
        """Others' requests per second (None: unknown)."""
        if any(interval.requests is None for interval in self._recent):
            return None
        return self._smoothed(lambda interval: interval.requests or 0.0)

    def _smoothed(self, amount: Callable[[_Interval], float]) -> float | None:
        if not self._recent:
            return None
        total = sum(interval.weight for interval in self._recent)
        if total <= 0:
            return 0.0  # nothing arrived from anyone in the window
        rates = (interval.weight * amount(interval) / interval.seconds for interval in self._recent)
        return sum(rates) / total
