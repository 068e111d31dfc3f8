"""Map serving engines' Prometheus names onto Meridian's signals. Pure: text in, values out.

Names, checked against each exporter's source at a current release (pages in
``tests/signals/pages/``, one per release, each naming the release it came from):

- vLLM (V1, 0.11+): ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:kv_cache_usage_perc`` (a 0..1 fraction despite the name; V0's
  ``vllm:gpu_cache_usage_perc`` is read when present); prefix-cache hit rate from the counters
  ``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total`` (tokens), else
  ``vllm:prompt_tokens_cached_total`` / ``vllm:prompt_tokens_total``, else V0's gauge
  ``vllm:gpu_prefix_cache_hit_rate``.
- SGLang (0.5): ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, ``sglang:token_usage``
  (0..1 of the KV pool); hit rate from ``sglang:cached_tokens_total`` (summed over
  ``cache_source``) / ``sglang:prompt_tokens_total``, else the gauge ``sglang:cache_hit_rate``.
- TGI (3.x): ``tgi_batch_current_size`` (running), ``tgi_queue_size`` (waiting); no KV or
  prefix-cache series.
- llama.cpp server: ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``; hit rate
  from ``llamacpp:prompt_tokens_cached_total`` and ``llamacpp:prompt_tokens_total`` (which
  *excludes* the cached tokens, so queries = both). Current builds export no KV gauge; older
  ones' ``llamacpp:kv_cache_usage_ratio`` is read when present.

``EXPECTED`` lists what a current release of each engine carries: a page missing one of them
is reported (``EngineSignals.missing``), so a renamed metric shows up as a warning and a metric
instead of a signal that is silently always unknown.

Series with several label sets (data-parallel engines, several models) are summed for counts
and maxed for usage ratios: the fullest engine is the one a new request may land on.

Only lines naming a wanted metric reach the prometheus-client parser: an engine page carries
dozens of histograms we do not use, and parsing them all would cost the event loop
milliseconds per scrape instead of microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from prometheus_client.parser import text_string_to_metric_families

from gateway.signals.errors import SignalError, SignalErrorKind
from gateway.signals.targets import Engine


class Signal(StrEnum):
    RUNNING = "running"
    WAITING = "waiting"
    KV_CACHE_USAGE = "kv_cache_usage"
    PREFIX_HIT_RATE = "prefix_cache_hit_rate"
    PREFIX_HITS = "prefix_cache_hits"  # cumulative counter: turned into a rate between scrapes
    PREFIX_QUERIES = "prefix_cache_queries"
    PROMPT_CACHED = "prompt_tokens_cached"  # cumulative: cached prompt tokens
    PROMPT_TOKENS = "prompt_tokens"  # cumulative: prompt tokens (see _PROMPT_EXCLUDES_CACHED)
    FINISHED = "requests_finished"  # cumulative: requests finished (every finished_reason)


_RATIOS = frozenset({Signal.KV_CACHE_USAGE, Signal.PREFIX_HIT_RATE})

# Per engine: signal -> candidate sample names, preferred first (newer names before older).
ENGINE_NAMES: Mapping[Engine, Mapping[Signal, tuple[str, ...]]] = {
    Engine.VLLM: {
        Signal.RUNNING: ("vllm:num_requests_running",),
        Signal.WAITING: ("vllm:num_requests_waiting",),
        Signal.KV_CACHE_USAGE: ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        Signal.PREFIX_HIT_RATE: ("vllm:gpu_prefix_cache_hit_rate",),
        Signal.PREFIX_HITS: ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"),
        Signal.PREFIX_QUERIES: ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"),
        Signal.PROMPT_CACHED: ("vllm:prompt_tokens_cached_total",),
        Signal.PROMPT_TOKENS: ("vllm:prompt_tokens_total",),
        Signal.FINISHED: ("vllm:request_success_total", "vllm:request_success"),
    },
    Engine.SGLANG: {
        Signal.RUNNING: ("sglang:num_running_reqs",),
        Signal.WAITING: ("sglang:num_queue_reqs",),
        Signal.KV_CACHE_USAGE: ("sglang:token_usage",),
        Signal.PREFIX_HIT_RATE: ("sglang:cache_hit_rate",),
        Signal.PROMPT_CACHED: ("sglang:cached_tokens_total",),
        Signal.PROMPT_TOKENS: ("sglang:prompt_tokens_total",),
    },
    Engine.TGI: {
        Signal.RUNNING: ("tgi_batch_current_size",),
        Signal.WAITING: ("tgi_queue_size",),
    },
    Engine.LLAMACPP: {
        Signal.RUNNING: ("llamacpp:requests_processing",),
        Signal.WAITING: ("llamacpp:requests_deferred",),
        Signal.KV_CACHE_USAGE: ("llamacpp:kv_cache_usage_ratio",),  # older builds only
        Signal.PROMPT_CACHED: ("llamacpp:prompt_tokens_cached_total",),
        Signal.PROMPT_TOKENS: ("llamacpp:prompt_tokens_total",),
    },
}

# Engines whose prompt-token counter counts only the tokens actually prefilled.
_PROMPT_EXCLUDES_CACHED = frozenset({Engine.LLAMACPP})

# What a current release of each engine exports (derived signals, after fallbacks).
EXPECTED: Mapping[Engine, tuple[str, ...]] = {
    Engine.VLLM: ("running", "waiting", "kv_cache_usage", "prefix_cache_hit_rate"),
    Engine.SGLANG: ("running", "waiting", "kv_cache_usage", "prefix_cache_hit_rate"),
    Engine.TGI: ("running", "waiting"),
    Engine.LLAMACPP: ("running", "waiting", "prefix_cache_hit_rate"),
}


@dataclass(frozen=True, slots=True)
class PrefixCounters:
    hits: float
    queries: float


@dataclass(frozen=True, slots=True)
class EngineSignals:
    """What one scrape said. ``None`` means the page did not carry that signal."""

    engine: Engine
    as_of: float  # monotonic seconds at which the scrape completed
    running: int | None = None
    waiting: int | None = None
    kv_cache_usage: float | None = None  # 0..1
    prefix_cache_hit_rate: float | None = None  # 0..1, since the previous scrape when counted
    prefix_counters: PrefixCounters | None = None
    # Requests finished, ever (vLLM's request_success_total, summed over finished_reason):
    # with running + waiting, the requests the engine took in between two scrapes.
    requests_finished: float | None = None
    missing: tuple[str, ...] = ()  # signals a current release of the engine exports, not found


def is_scraped(engine: Engine) -> bool:
    return engine in ENGINE_NAMES


def _wanted_prefixes(engine: Engine) -> tuple[str, ...]:
    return tuple(name for names in ENGINE_NAMES[engine].values() for name in names)


def relevant_lines(text: str, engine: Engine) -> str:
    """The page's lines that mention a wanted metric (samples and their TYPE/HELP comments)."""
    prefixes = _wanted_prefixes(engine)
    kept = []
    for line in text.splitlines():
        body = line[7:] if line.startswith(("# TYPE ", "# HELP ")) else line
        if body.startswith(prefixes):
            kept.append(line)
    return "\n".join(kept) + "\n"


def _collect(text: str) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if math.isfinite(sample.value):
                values.setdefault(sample.name, []).append(float(sample.value))
    return values


def _pick(values: Mapping[str, list[float]], names: Iterable[str], signal: Signal) -> float | None:
    for name in names:
        found = values.get(name)
        if found:
            return max(found) if signal in _RATIOS else sum(found)
    return None


def _hit_rate(
    gauge: float | None, counters: PrefixCounters | None, previous: PrefixCounters | None
) -> float | None:
    if counters is None:
        return gauge
    if previous is not None:
        queries = counters.queries - previous.queries
        hits = counters.hits - previous.hits
        if queries > 0 and hits >= 0:
            return hits / queries
        if queries == 0 and counters.queries >= previous.queries:
            return None  # no traffic since the last scrape: no news, not a zero
    # First scrape, or the counters reset (engine restarted): the lifetime ratio.
    return counters.hits / counters.queries if counters.queries > 0 else None


def parse_engine_page(
    text: str, engine: Engine, as_of: float, previous: EngineSignals | None = None
) -> EngineSignals | SignalError:
    """Turn one metrics page into signals, or an error value saying why not."""
    names = ENGINE_NAMES.get(engine)
    if names is None:
        return SignalError(SignalErrorKind.MISSING_METRICS, f"engine {engine} is not scraped")
    try:
        values = _collect(relevant_lines(text, engine))
    except ValueError as exc:
        return SignalError(SignalErrorKind.MALFORMED, f"unparseable metrics page: {exc}")
    found = {signal: _pick(values, candidates, signal) for signal, candidates in names.items()}
    if all(value is None for value in found.values()):
        expected = ", ".join(sorted(_wanted_prefixes(engine))[:3])
        message = f"no {engine} metrics on the page (expected e.g. {expected}); wrong engine?"
        return SignalError(SignalErrorKind.MISSING_METRICS, message)
    counters = _prefix_counters(found, engine)
    previous_counters = previous.prefix_counters if previous is not None else None
    signals = EngineSignals(
        engine=engine,
        as_of=as_of,
        running=_count(found.get(Signal.RUNNING)),
        waiting=_count(found.get(Signal.WAITING)),
        kv_cache_usage=_ratio(found.get(Signal.KV_CACHE_USAGE)),
        prefix_cache_hit_rate=_ratio(
            _hit_rate(found.get(Signal.PREFIX_HIT_RATE), counters, previous_counters)
        ),
        prefix_counters=counters,
        requests_finished=found.get(Signal.FINISHED),
    )
    has_hit_rate = counters is not None or found.get(Signal.PREFIX_HIT_RATE) is not None
    present = {
        "running": signals.running is not None,
        "waiting": signals.waiting is not None,
        "kv_cache_usage": signals.kv_cache_usage is not None,
        "prefix_cache_hit_rate": has_hit_rate,
    }
    missing = tuple(name for name in EXPECTED.get(engine, ()) if not present[name])
    return replace(signals, missing=missing) if missing else signals


def _prefix_counters(found: Mapping[Signal, float | None], engine: Engine) -> PrefixCounters | None:
    """Hits and queries in tokens: the engine's prefix-cache counters, else its cached-prompt
    counter over its prompt counter."""
    hits, queries = found.get(Signal.PREFIX_HITS), found.get(Signal.PREFIX_QUERIES)
    if hits is not None and queries is not None:
        return PrefixCounters(hits, queries)
    cached, prompt = found.get(Signal.PROMPT_CACHED), found.get(Signal.PROMPT_TOKENS)
    if cached is None or prompt is None:
        return None
    return PrefixCounters(cached, prompt + cached if engine in _PROMPT_EXCLUDES_CACHED else prompt)


def _count(value: float | None) -> int | None:
    return None if value is None else max(0, round(value))


def _ratio(value: float | None) -> float | None:
    return None if value is None else min(1.0, max(0.0, value))
