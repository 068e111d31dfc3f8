"""One upstream attempt: send the request to one candidate and read until its first token.

An attempt ends one of three ways: an :class:`OpenedStream` (the first token, or a whole
non-streaming body, is in), an :class:`AttemptFailure` (refused, reset, timed out, 429/5xx, an
error event, malformed or empty before the first token: the relay may move on), or an
exception — :class:`ApiError` when the backend says the request itself is bad (400/413/422),
or cancellation (the client left, a hedge lost, the deadline passed). Whatever the ending, the
attempt leaves the router's and the fleet's in-flight counts exactly once and closes its
upstream response unless it hands it over inside the OpenedStream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
import orjson

from gateway.chain.hop import LOOP_STATUS, ChainError, ChainErrorKind
from gateway.doors.upstream import upstream_call
from gateway.errors import ApiError
from gateway.inbound import InboundRequest
from gateway.lag_timeout import LagForgivingTimeout
from gateway.lifecycle.handles import UpstreamHold, hold_upstream
from gateway.loop_health import LATEST
from gateway.metrics import GatewayMetrics
from gateway.opened_stream import OpenedStream, RouteInfo
from gateway.prediction_timing import PreparedEntries
from gateway.read_lag import FLOOR_MS
from gateway.relay_state import ClassPolicy, RelayState
from gateway.scrub import connect_words, scrub, status_words
from gateway.signals.outlier import FailureKind
from gateway.sse import SseSplitter
from gateway.stream import StreamBroken, UpstreamExchange
from gateway.tcp_connect import ConnectTimeout
from gateway.timing import StreamStats, TimingEntry, label_hop, parse
from gateway.upstream import ConnectionTiming
from gateway.upstream_response import UpstreamResponse
from routing.reservation import Reservation
from routing.types import Candidate, Observation

log = logging.getLogger("meridian.attempt")

_CLIENT_ERROR_STATUSES = frozenset({400, 413, 422})
# "This server does not serve that API" (501; 404 for an API path it has no route for): the
# backend is not at fault and its answer teaches nothing about its latency — the next
# candidate is tried, nothing goes to outlier detection or the learner.
UNSERVED_STATUSES = frozenset({404, 501})
_MAX_ERROR_BODY = 64 * 1024
_BEHIND_S = FLOOR_MS / 1000.0  # a loop this late holds first tokens the kernel can time


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    backend: str
    kind: str  # connect | timeout | status | unserved | error_event | malformed | empty
    message: str
    status: int | None = None
    retry_after_s: float | None = None

    def outlier_kind(self) -> FailureKind:
        """How outlier detection counts it: 429 is back-pressure, not a fault; an unserved
        API says nothing about the backend (counted like a cancelled request: not at all)."""
        if self.kind == "unserved":
            return FailureKind.CANCELLED
        if self.kind == "connect":
            return FailureKind.CONNECT_ERROR
        if self.kind == "timeout":
            return FailureKind.TIMEOUT
        if self.status == 429:
            return FailureKind.CLIENT_ERROR
        return FailureKind.SERVER_ERROR


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """What every attempt of one request shares."""

    state: RelayState
    metrics: GatewayMetrics
    inbound: InboundRequest
    forward_headers: Mapping[str, str]
    policy: ClassPolicy
    prepared: PreparedEntries  # the first byte's entries, worked out while upstream
    # The door builds from each event's parsed object (gRPC): the exchange keeps it on the
    # event (SseEvent.parsed). Others write the bytes as they came and never hold one.
    keep_parsed: bool = False


def retry_after(response: UpstreamResponse) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def error_message(body: bytes) -> str:
    """The upstream's error text, scrubbed (gateway/scrub.py): for the client's own 4xx only."""
    try:
        obj = orjson.loads(body)
        message = obj["error"]["message"] if isinstance(obj.get("error"), dict) else obj["message"]
        return scrub(str(message))
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return scrub(body[:200].decode(errors="replace"))


async def run_attempt(
    ctx: AttemptContext, candidate: Candidate, attempt: int, reservation: Reservation
) -> OpenedStream | AttemptFailure:
    """Try ``candidate`` on ``reservation`` (the router's count for it, from decide or
    reserve): the attempt's counts are one :class:`UpstreamHold`, ended on every exit but a
    win, where it moves into the :class:`OpenedStream` for :meth:`Relay.finish`."""
    name = candidate.backend
    state = ctx.state
    timing = ConnectionTiming()
    sent_at = time.perf_counter()
    hold = hold_upstream(reservation, state.fleet, ctx.metrics, ctx.inbound.profile.prompt_tokens)
    response: UpstreamResponse | None = None
    first_token_s = ctx.policy.first_token_s
    asyncio.get_running_loop().call_soon(ctx.prepared.prepare, candidate)  # while it works
    try:
        # The loop's own lag is not the backend's wait (gateway/lag_timeout.py).
        async with LagForgivingTimeout(first_token_s):
            call = upstream_call(ctx.inbound, state, name)  # path, body and wire format
            response = await state.pool[name].post(
                call.path, call.body, ctx.forward_headers, timing
            )
            if response.status != 200:
                return failed(ctx, hold, await _status_failure(name, response), response)
            spec = state.specs[name]
            route = RouteInfo(
                name, spec.region, spec.kind._value_, attempt, candidate.predicted_ttft_ms
            )
            exchange = UpstreamExchange(
                response,
                StreamStats.for_choices(ctx.inbound.received_at, ctx.inbound.choices),
                call.grammar,
                inter_token_s=ctx.policy.inter_token_s,
                keep_parsed=ctx.keep_parsed,
            )
            opened = OpenedStream(spec, route, exchange, [], state=state, upstream_hold=hold)
            # Its own timing is in the headers, in before its first token (engines send them
            # at once): read now, not between the first token and the first byte out.
            hop = label_hop(parse(response.headers.get("Server-Timing", "")), name)
            failure = await _read_first(exchange, name, ctx.inbound.stream)
            if failure is not None:
                return failed(ctx, hold, failure, response)
    except TimeoutError as exc:
        if isinstance(exc, ConnectTimeout):
            message = "no connection within the connect timeout"
        else:
            message = f"no first token within {first_token_s:.1f}s"
        return failed(ctx, hold, AttemptFailure(name, "timeout", message), response)
    except (aiohttp.ClientError, OSError) as exc:
        log.warning("backend=%s connect failed: %s", name, scrub(repr(exc)))
        return failed(ctx, hold, AttemptFailure(name, "connect", connect_words(exc)), response)
    except ApiError:  # the backend says the request itself is bad
        _close(response)
        hold.end(FailureKind.CLIENT_ERROR)
        raise
    except BaseException:  # cancelled: the client went away, a hedge lost, the deadline
        _close(response)
        hold.end(FailureKind.CANCELLED)
        raise
    _record_first_token(ctx, opened, candidate, timing, sent_at, hop)
    return opened


def _record_first_token(
    ctx: AttemptContext,
    opened: OpenedStream,
    candidate: Candidate,
    timing: ConnectionTiming,
    sent_at: float,
    hop: list[TimingEntry],
) -> None:
    name = candidate.backend
    now = time.perf_counter()
    ttfb_ms = (now - sent_at) * 1000.0
    # The first token's wait in the kernel while the loop was busy is the gateway's time, not
    # the backend's: routing learns upstream_ttfb (gateway/read_lag.py). The kernel's word is a
    # syscall, ~60 us of a c=1 first token on cold caches (python -m loadtests.first_token_clock):
    # asked only while the loop is (or lately was) behind, or of a token later than routing
    # expected.
    unread_ms = 0.0
    connection = opened.exchange.response.connection
    if connection is not None and (
        LATEST.behind(now, _BEHIND_S) or ttfb_ms > (candidate.predicted_ttft_ms or 0.0) + FLOOR_MS
    ):
        unread_ms = connection.unread_ms()
    opened.upstream_ttfb_ms = max(0.0, ttfb_ms - unread_ms)
    opened.upstream_read_lag_ms = unread_ms
    opened.predicted_terms_ms = candidate.terms_ms
    entries = opened.entries
    entries.append(TimingEntry("upstream_connect", timing.connect_ms))
    entries.append(TimingEntry("upstream_ttfb", opened.upstream_ttfb_ms))
    if unread_ms:
        entries.append(TimingEntry("upstream_read_lag", unread_ms))
    entries.extend(hop)
    ctx.metrics.upstream_attempts_of[name, "ok"].inc()


async def _read_first(exchange: UpstreamExchange, name: str, stream: bool) -> AttemptFailure | None:
    """Read until the first token (streaming) or the whole body; None when it came."""
    if not stream:
        body = await exchange.response.read()
        answer = exchange.grammar.answer(body)
        if answer is None:  # another backend may answer properly
            return AttemptFailure(name, "malformed", "answer is not a JSON object of its format")
        exchange.body = body
        usage = answer.get("usage")
        if isinstance(usage, dict):
            exchange.usage = usage
        exchange.stats.on_token_event(time.perf_counter())
        return None
    splitter = SseSplitter()
    exchange.splitter = splitter
    while True:
        chunk = await exchange.response.content.readany()
        exchange.consumed += len(chunk)
        try:
            events = splitter.feed(chunk) if chunk else splitter.flush()
        except ValueError as exc:
            return AttemptFailure(name, "malformed", str(exc))
        for event in events:
            try:  # the byte pre-check first: one call for a plain token or role-only chunk
                exchange.check(event, ended=False)
            except StreamBroken as broken:
                return _broken_first(name, broken)
            exchange.first_events.append(event)
        if exchange.stats.first_token_at is not None or exchange.saw_done:
            return None
        if not chunk:
            return AttemptFailure(name, "empty", "stream ended before the first token")


def _broken_first(name: str, broken: StreamBroken) -> AttemptFailure:
    """An event before the first token that breaks the stream: another backend may answer."""
    if broken.kind == "upstream_error_event":  # its words were logged, scrubbed, by check
        log.warning("backend=%s sent an error event before its first token", name)
        return AttemptFailure(name, "error_event", "backend sent an error event")
    return AttemptFailure(name, "malformed", "malformed data event before first token")


async def _status_failure(name: str, response: UpstreamResponse) -> AttemptFailure:
    body = await response.content.read(_MAX_ERROR_BODY)
    message = error_message(body)
    if response.status == LOOP_STATUS:
        raise ChainError(ChainErrorKind.LOOP, message).api_error()
    if response.status in _CLIENT_ERROR_STATUSES:
        raise ApiError(response.status, message, "invalid_request_error", "upstream_rejected")
    if response.status in UNSERVED_STATUSES:
        log.info("backend=%s does not serve this API (HTTP %d)", name, response.status)
        return AttemptFailure(name, "unserved", status_words(response.status), response.status)
    log.warning("backend=%s HTTP %d: %s", name, response.status, message)
    return AttemptFailure(
        name, "status", status_words(response.status), response.status, retry_after(response)
    )


def failed(
    ctx: AttemptContext,
    hold: UpstreamHold,
    failure: AttemptFailure,
    response: UpstreamResponse | None,
) -> AttemptFailure:
    """An attempt failed before its first token: counted, and its hold ended with what the
    router learns from it (nothing from an unserved API)."""
    ctx.metrics.upstream_attempts_of[failure.backend, failure.kind].inc()
    _close(response)
    observation = None
    if failure.kind != "unserved":
        observation = Observation(
            backend=failure.backend, at=time.monotonic(), ok=False, error_kind=failure.kind
        )
    hold.end(failure.outlier_kind(), observation)
    return failure


def _close(response: UpstreamResponse | None) -> None:
    if response is not None:
        response.close()


def discard(opened: OpenedStream) -> None:
    """A hedge that produced its first token too late: close it as if cancelled."""
    opened.close()
    if opened.upstream_hold is not None:
        opened.upstream_hold.end(FailureKind.CANCELLED)
