"""Other clients' prefill arriving on a backend between two scrapes of its engine.

A scrape is a picture of the past; this router's own requests since are in its ledger
(``routing.prefilling``), but other gateways' are not: several gateways acting on the same
second-old scrape pile onto the backend it shows idle. The engine's monotonic prefix-cache
counters (vLLM's ``prefix_cache_queries_total`` and ``_hits_total``, in tokens, counted at
admission from every client) say how much uncached prompt the backend took in over the last
scrape interval; less this router's own prompt tokens sent in the same interval (at the
interval's hit rate, since which of them hit is not known here), that is the others'
arrival rate. The predictor extrapolates it: the others' uncached work that arrived since the
scrape and is still before its first token (``RowTerms.arrivals``) is queued ahead. Their
requests also take batch slots, for seconds (their whole answer): the engine's finished counter
plus the growth of running + waiting is its arrivals, less ours the others' request rate, and
the ones since the scrape fill the free slots first, then queue (``RowTerms.arrival_rps``).
"""

from __future__ import annotations


def others_uncached_per_s(
    queries: float, hits: float, own_prompt: float, interval_s: float
) -> float | None:
    """Uncached prompt tokens per second other clients sent over one scrape interval.

    ``queries``/``hits``: the growth of the engine's prefix-cache counters over the interval
    (tokens); ``own_prompt``: the prompt tokens this gateway sent there in it. None when the
    counters say nothing usable (no interval, or a reset: an engine restart)."""
    if interval_s <= 0 or queries < 0 or hits < 0 or hits > queries:
        return None
    if queries == 0:
        return 0.0
    others = queries - own_prompt
    if others <= 0:
        return 0.0
    return others * (1.0 - hits / queries) / interval_s


def others_requests_per_s(arrived: float, own: float, interval_s: float) -> float | None:
    """Requests per second other clients sent over one scrape interval: ``arrived`` is the
    engine's finished counter's growth plus its running + waiting's, ``own`` ours in it."""
    if interval_s <= 0 or arrived < 0:
        return None
    return max(arrived - own, 0.0) / interval_s
