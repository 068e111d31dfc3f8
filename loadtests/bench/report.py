"""From a run's records to the numbers users quote: percentiles, throughput, goodput, breakdowns.

Latency distributions (milliseconds) cover successful requests only; a failure counts in
``errors`` and against goodput. ITL pools every inter-token gap of every successful request.
Throughput divides by the run's duration (first send to last completion).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loadtests.bench.records import BenchResult, RequestRecord
from loadtests.bench.stats import Distribution, Slo, flatten, rate

MS = 1000.0
NO_ROUTE = "(no route header)"


@dataclass(frozen=True)
class Goodput:
    slo_ttft_ms: float | None
    slo_itl_p99_ms: float | None
    good: int
    fraction: float  # of all requests, failures included
    per_s: float


@dataclass(frozen=True)
class GroupSummary:
    """One slice of the run (an origin region, a backend, a tenant, a workload component)."""

    requests: int
    errors: int
    ttft_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution
    output_tokens_per_s: float
    goodput_fraction: float


@dataclass(frozen=True)
class BenchReport:
    url: str
    workload: str
    mode: str
    seed: int
    started_unix: float
    duration_s: float
    requests: int
    ok: int
    errors: dict[str, int]
    request_per_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    usage_reported_fraction: float
    ttft_ms: Distribution
    itl_ms: Distribution
    tpot_ms: Distribution  # per request: (e2e - ttft) / (output tokens - 1)
    e2e_ms: Distribution
    send_lag_ms: Distribution  # how late the generator sent each request: its own overhead
    loop_lag_ms: Distribution  # how late the client's event loop ran timers: timestamp error
    goodput: Goodput
    by_origin: dict[str, GroupSummary]
    by_backend: dict[str, GroupSummary]
    by_tenant: dict[str, GroupSummary]
    by_component: dict[str, GroupSummary]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _tpot(record: RequestRecord) -> float | None:
    if record.ttft_s is None or record.e2e_s is None or len(record.token_times_s) < 2:
        return None
    return (record.token_times_s[-1] - record.ttft_s) / (len(record.token_times_s) - 1)


def _latencies(records: Sequence[RequestRecord]) -> tuple[Distribution, ...]:
    ok = [r for r in records if r.ok]
    ttft = Distribution.of([r.ttft_s for r in ok if r.ttft_s is not None]).scaled(MS)
    itl = Distribution.of(flatten(r.itl_gaps_s for r in ok)).scaled(MS)
    e2e = Distribution.of([r.e2e_s for r in ok if r.e2e_s is not None]).scaled(MS)
    return ttft, itl, e2e


def _good(records: Sequence[RequestRecord], slo: Slo) -> int:
    return sum(1 for r in records if r.ok and slo.is_met(r.ttft_s, r.itl_gaps_s))


def _group(records: Sequence[RequestRecord], duration_s: float, slo: Slo) -> GroupSummary:
    ttft, itl, e2e = _latencies(records)
    output = sum(r.completion_tokens or 0 for r in records if r.ok)
    return GroupSummary(
        requests=len(records),
        errors=sum(1 for r in records if not r.ok),
        ttft_ms=ttft,
        itl_ms=itl,
        e2e_ms=e2e,
        output_tokens_per_s=rate(output, duration_s),
        goodput_fraction=_good(records, slo) / len(records) if records else 0.0,
    )


def _breakdown(
    records: Sequence[RequestRecord],
    key: Callable[[RequestRecord], str],
    duration_s: float,
    slo: Slo,
) -> dict[str, GroupSummary]:
    groups: dict[str, list[RequestRecord]] = defaultdict(list)
    for record in records:
        groups[key(record)].append(record)
    return {name: _group(groups[name], duration_s, slo) for name in sorted(groups)}


def summarize(result: BenchResult, slo: Slo | None = None) -> BenchReport:
    slo = slo or Slo()
    records = result.records
    duration = result.duration_s
    ok = [r for r in records if r.ok]
    ttft, itl, e2e = _latencies(records)
    good = _good(records, slo)
    errors = Counter(r.error_label for r in records if r.error_label is not None)
    tpots = [t for t in map(_tpot, ok) if t is not None]
    return BenchReport(
        url=result.url,
        workload=result.workload,
        mode=result.mode,
        seed=result.seed,
        started_unix=result.started_unix,
        duration_s=duration,
        requests=len(records),
        ok=len(ok),
        errors=dict(sorted(errors.items())),
        request_per_s=rate(len(ok), duration),
        output_tokens_per_s=rate(sum(r.completion_tokens or 0 for r in ok), duration),
        input_tokens_per_s=rate(sum(r.prompt_tokens or 0 for r in ok), duration),
        prompt_tokens=sum(r.prompt_tokens or 0 for r in ok),
        completion_tokens=sum(r.completion_tokens or 0 for r in ok),
        cached_tokens=sum(r.cached_tokens or 0 for r in ok),
        usage_reported_fraction=sum(r.usage_reported for r in ok) / len(ok) if ok else 0.0,
        ttft_ms=ttft,
        itl_ms=itl,
        tpot_ms=Distribution.of(tpots).scaled(MS),
        e2e_ms=e2e,
        send_lag_ms=Distribution.of([r.sent_s - r.scheduled_s for r in records]).scaled(MS),
        loop_lag_ms=Distribution.of(result.loop_lag_s).scaled(MS),
        goodput=Goodput(
            slo_ttft_ms=slo.ttft_ms,
            slo_itl_p99_ms=slo.itl_p99_ms,
            good=good,
            fraction=good / len(records) if records else 0.0,
            per_s=rate(good, duration),
        ),
        by_origin=_breakdown(records, lambda r: r.origin, duration, slo),
        by_backend=_breakdown(records, lambda r: r.backend or NO_ROUTE, duration, slo),
        by_tenant=_breakdown(records, lambda r: r.tenant, duration, slo),
        by_component=_breakdown(records, lambda r: r.component, duration, slo),
    )
