"""What one bench run observed: a record per request, and the run that holds them.

Times are seconds from ``time.perf_counter()``; ``scheduled_s`` and ``sent_s`` are offsets from
the run's start so records of one run share a time axis (the latency timeline plots them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from loadtests.bench.stats import inter_token_gaps


class ErrorKind(enum.StrEnum):
    """Why a request did not complete normally; the report counts each kind separately."""

    HTTP_STATUS = "http_status"  # non-2xx response; the status code is in ``status``
    CONNECT = "connect"  # could not open a connection (refused, reset before response)
    TIMEOUT = "timeout"  # no completion within the request timeout
    STREAM_BROKEN = "stream_broken"  # the connection ended mid-stream without [DONE]
    STREAM_ERROR = "stream_error"  # the server sent an error object inside the stream
    BAD_RESPONSE = "bad_response"  # a chunk that is not the OpenAI schema
    NO_TOKENS = "no_tokens"  # the stream finished without a single token


def error_label(kind: ErrorKind, status: int | None) -> str:
    """The key errors are counted under: ``http_429`` rather than a lump of ``http_status``."""
    if kind is ErrorKind.HTTP_STATUS and status is not None:
        return f"http_{status}"
    return kind.value


def backend_from_route(route: str | None) -> str | None:
    """The backend named by an ``X-Meridian-Route`` header.

    Accepts ``backend=a1; region=us-east`` style key/value lists (``backend`` or ``b`` key), and
    otherwise takes the last hop of a path like ``us-east/a1`` or ``gw-eu > b1``.
    """
    if not route:
        return None
    for part in route.replace(",", ";").split(";"):
        key, sep, value = part.partition("=")
        if sep and key.strip().lower() in {"backend", "b"}:
            return value.strip().strip('"') or None
    if "=" in route:
        return None
    last_hop = route.replace(">", "/").split("/")[-1].strip()
    return last_hop or None


@dataclass(frozen=True)
class RequestRecord:
    index: int  # order in which requests were started
    session: int
    turn: int
    component: str  # which workload mix entry produced it
    origin: str
    tenant: str
    scheduled_s: float  # when the arrival process wanted it sent
    sent_s: float  # when the client actually started it (lag = sent - scheduled)
    ttft_s: float | None
    e2e_s: float | None
    token_times_s: tuple[float, ...] = ()  # arrival of each token-carrying chunk, from sent_s
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    usage_reported: bool = False  # token counts came from the server's ``usage`` object
    status: int | None = None
    error: ErrorKind | None = None
    error_detail: str = ""
    route: str | None = None
    server_timing: str | None = None
    final_comment: str | None = None  # raw text of Meridian's closing ``: meridian-timing {...}``
    max_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def backend(self) -> str | None:
        return backend_from_route(self.route)

    @property
    def itl_gaps_s(self) -> tuple[float, ...]:
        return inter_token_gaps(self.token_times_s)

    @property
    def error_label(self) -> str | None:
        return None if self.error is None else error_label(self.error, self.status)


@dataclass(frozen=True)
class BenchResult:
    url: str
    workload: str
    mode: str  # "open" or "closed"
    seed: int
    started_unix: float  # wall clock at start, for humans reading the JSON
    duration_s: float  # first send to last completion
    records: tuple[RequestRecord, ...] = field(default_factory=tuple)
    loop_lag_s: tuple[float, ...] = ()  # lateness of a 10 ms timer in the client's event loop
