"""Other clients' prefill arriving on a backend between two scrapes of its engine.

A scrape is a picture of the past; this router's own requests since are in its ledger
(``routing.prefilling``), but other gateways' are not: several gateways acting on the same
second-old scrape pile onto the backend it shows idle. The engine's monotonic prefix-cache
counters (vLLM's ``prefix_cache_queries_total`` and ``_hits_total``, in tokens, counted at
admission from every client) say how much uncached prompt the backend took in over the last few
scrape intervals; less this gateway's own uncached prompt over the same intervals (its prompt
tokens sent, less the cached tokens its answers reported), that is the others' arrival rate.
Their requests also take batch slots, for seconds (their whole answer): the engine's finished
counter plus the growth of running + waiting is its arrivals, less ours the others' request
rate. :class:`ArrivalLedger` keeps one gateway's account of one backend and pools both rates
over the last few scrape intervals (what arrived in them over their length): one quiet or
bursty second is not extrapolated on its own. (Weighting each interval by the requests the
engine saw in it instead was measured worse: it holds a burst's rate through the quiet
seconds after it, which weigh nothing.) The predictor extrapolates the rates:
the others' uncached work that arrived since the scrape and is still before its first token
(``RowTerms.arrivals``) is queued ahead, and their requests since fill the free slots first,
then queue (``RowTerms.arrival_rps``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

# Scrape intervals the rates are smoothed over (1 s scrapes: the last 3 s).
SMOOTHED_INTERVALS = 3


@dataclass(frozen=True, slots=True)
class EngineTotals:
    """One scrape of an engine's cumulative counters."""

    at: float  # when it was taken (seconds, the caller's clock)
    queries: float  # prefix-cache queries, tokens, ever
    hits: float  # prefix-cache hits, tokens, ever
    arrived: float | None = None  # requests ever: finished + running + waiting (None: unknown)


@dataclass(frozen=True, slots=True)
class _Interval:
    """What one scrape interval saw: the engine's counts from every client and ours."""

    seconds: float
    uncached: float  # uncached prompt tokens the engine took in
    own_prompt: float  # prompt tokens we sent
    own_hits: float  # cached tokens our answers reported
    arrived: float | None  # requests the engine took in (None: the engine does not say)
    own_requests: float


class ArrivalLedger:
    """One gateway's account of one backend: its own requests, prompt tokens and reported
    cached tokens since the last scrape, and the engine's counts over the last few intervals.
    Feed it :meth:`sent` and :meth:`hit` as requests go and come back, and :meth:`scraped` on
    each new scrape; read :attr:`uncached_per_s`, :attr:`requests_per_s`.

    Ours are subtracted over the whole window, not interval by interval: a request we counted
    at its send can reach the engine's counters one scrape later (a path slower than the
    probe says), and a hit is reported at the end of its answer, seconds after its prompt."""

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
        """A new scrape: what the engine took in since the previous one joins the window,
        with ours in the same time."""
        last, self._last = self._last, totals
        own_requests, own_prompt, own_hits = self._requests, self._prompt, self._hits
        self._requests, self._prompt, self._hits = 0, 0.0, 0.0
        if last is None:
            return
        seconds = totals.at - last.at
        queries, hits = totals.queries - last.queries, totals.hits - last.hits
        arrived = None
        if totals.arrived is not None and last.arrived is not None:
            arrived = totals.arrived - last.arrived
        unreadable = (
            queries < 0 or hits < 0 or hits > queries or (arrived is not None and arrived < 0)
        )
        if seconds <= 0 or unreadable:
            self._recent.clear()  # a reset (the engine restarted) or an unreadable interval
            return
        self._recent.append(
            _Interval(seconds, queries - hits, own_prompt, own_hits, arrived, own_requests)
        )

    @property
    def uncached_per_s(self) -> float | None:
        """Others' uncached prompt tokens per second (None: no interval measured yet)."""
        recent = self._recent
        if not recent:
            return None
        own = sum((i.own_prompt for i in recent), 0.0) - sum((i.own_hits for i in recent), 0.0)
        others = sum((i.uncached for i in recent), 0.0) - max(own, 0.0)
        return max(others, 0.0) / sum((i.seconds for i in recent), 0.0)

    @property
    def requests_per_s(self) -> float | None:
        """Others' requests per second (None: unknown)."""
        recent = self._recent
        if not recent or any(i.arrived is None for i in recent):
            return None
        own = sum((i.own_requests for i in recent), 0.0)
        others = sum((i.arrived or 0.0 for i in recent), 0.0) - own
        return max(others, 0.0) / sum((i.seconds for i in recent), 0.0)
