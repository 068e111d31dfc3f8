"""What one request's log line (and its metrics and span) are made of, gathered along its life.

The relay core fills a :class:`RequestRecord` at its seams (the hop, the candidate walk, the
winning attempt) and hands it to :class:`~gateway.observability.observer.RequestObserver` once,
when the request ends. Only ids, names, numbers and error *kinds* go in: never prompt or
completion text, never a header value, never an upstream error message (it may echo the prompt).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.chain.hop import HopContext
    from gateway.inbound import InboundRequest
    from gateway.lifecycle.states import Lifecycle
    from gateway.opened_stream import OpenedStream
    from gateway.walk import CandidateWalk

CLIENT_CLOSED_STATUS = 499  # nginx's "client closed request": no response was completed


class Outcome(StrEnum):
    OK = "ok"
    FAILED = "failed"  # an error status, or a stream that broke after its first token
    CANCELLED = "cancelled"  # the client went away


@dataclass(slots=True)
class RequestRecord:
    """One request, as far as the relay core got with it."""

    inbound: InboundRequest
    door: str
    hop: HopContext | None = None
    walk: CandidateWalk | None = None
    winner: int | None = None  # attempt number that produced the first token
    route_started: float | None = None  # perf_counter() when routing began
    route_ms: float | None = None
    queue_s: float | None = None  # waiting for an admission slot
    lifecycle: Lifecycle | None = None  # where the request is (gateway/lifecycle/states.py)

    @property
    def trace_id(self) -> str | None:
        return self.hop.trace.trace_id if self.hop is not None else None

    def attempts(self) -> list[dict[str, Any]]:
        """Each attempt's backend, whether it was a hedge, and how it ended."""
        walk = self.walk
        if walk is None:
            return []
        return [
            {
                "backend": rec.backend,
                "hedge": rec.hedge,
                "outcome": "ok"
                if number == self.winner
                else walk.outcomes.get(number, "cancelled"),
            }
            for number, rec in enumerate(walk.records, start=1)
        ]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def lifecycle_fields(record: RequestRecord) -> dict[str, str]:
    """The lifecycle state the request reached and the live state it ended from (where a
    request that ended by deadline or drain was stuck)."""
    lifecycle = record.lifecycle
    if lifecycle is None:
        return {}
    fields = {"lifecycle": lifecycle.state.value}
    if lifecycle.ended_from is not None:
        fields["ended_from"] = lifecycle.ended_from.value
    return fields


def base_line(record: RequestRecord) -> dict[str, Any]:
    inbound = record.inbound
    return {
        "request_id": inbound.request_id,
        "trace_id": record.trace_id,
        "door": record.door,
        "endpoint": inbound.endpoint.value,
        "model": inbound.model,
        "tenant": inbound.tenant,
        "origin": inbound.profile.origin,
        "stream": inbound.stream,
        **lifecycle_fields(record),
    }


def opened_line(
    record: RequestRecord,
    opened: OpenedStream,
    now: float,
    outcome: Outcome,
    error: str | None,
) -> dict[str, Any]:
    """The line of a request that got a first token (its stream may still have failed)."""
    inbound = record.inbound
    stats = opened.exchange.stats
    route = opened.route
    p50, p99, _ = stats.itl_percentiles()
    first = stats.first_token_at
    usage = opened.exchange.usage or {}
    prompt = usage.get("prompt_tokens")
    line = base_line(record)
    line.update(
        {
            "route": {"region": route.region, "backend": route.backend, "kind": route.kind},
            "attempts": route.attempts,
            "hedges": route.hedges,
            "attempt_outcomes": record.attempts(),
            "route_ms": None if record.route_ms is None else round(record.route_ms, 3),
            "predicted_ttft_ms": route.predicted_ttft_ms,
            "ttft_ms": _ms(first - inbound.received_at) if first is not None else None,
            "upstream_ttfb_ms": opened.upstream_ttfb_ms,
            "upstream_read_lag_ms": opened.upstream_read_lag_ms,
            "itl_p50_ms": None if p50 is None else round(p50, 3),
            "itl_p99_ms": None if p99 is None else round(p99, 3),
            "prompt_tokens": prompt if isinstance(prompt, int) else inbound.profile.prompt_tokens,
            "prompt_tokens_estimated": not isinstance(prompt, int),
            "cached_tokens": opened.exchange.cached_tokens(),
            "completion_tokens": opened.exchange.output_tokens(),
            "e2e_ms": _ms(now - inbound.received_at),
            "status": CLIENT_CLOSED_STATUS if outcome is Outcome.CANCELLED else 200,
            "outcome": outcome.value,
            "error": error,
        }
    )
    return line


def failed_line(record: RequestRecord, status: int, error: str, outcome: Outcome) -> dict[str, Any]:
    """The line of a request that ended before any first token reached the client."""
    inbound = record.inbound
    attempts = record.attempts()
    line = base_line(record)
    line.update(
        {
            "route": None,
            "attempts": len(attempts),
            "hedges": sum(1 for a in attempts if a["hedge"]),
            "attempt_outcomes": attempts,
            "route_ms": None if record.route_ms is None else round(record.route_ms, 3),
            "prompt_tokens": inbound.profile.prompt_tokens,
            "prompt_tokens_estimated": True,
            "e2e_ms": _ms(time.perf_counter() - inbound.received_at),
            "status": status,
            "outcome": outcome.value,
            "error": error,
        }
    )
    return line
