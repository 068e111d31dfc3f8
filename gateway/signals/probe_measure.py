"""One probe's worth of HTTP: a timed round trip and a timed 1-token canary. No scheduling.

Round trip, measured two ways because they answer different questions:

- ``pooled_ms``: a light request on a kept-alive connection. This is what a routed request
  pays on the gateway's pooled upstream connections (one network round trip plus the
  backend's trivial handling), so it is the RTT fed to routing.
- ``fresh_ms`` / ``connect_ms``: the same request on a new connection, and the connection
  set-up inside it. ``connect_ms`` (TCP, plus TLS where used) is the purest network RTT we can
  see (the kernel answers a SYN, no application queue in the way); ``fresh_ms`` is what the
  first request after a pool eviction pays. Both are reported for explain and dashboards.

A pooled request that had to open a connection anyway is not a pooled sample and is dropped.

An answer that waited unread in the kernel while the gateway's loop was busy (a burst of new
streams) is timed to its arrival, not to its read: the wait is the gateway's, and a round trip
or a canary TTFT that counted it made every backend look slower by the gateway's own lag
(gateway/read_lag.py; the kernel is asked once per probe, ~15-60 us). A fresh request's
connection is closed by the time its answer is read, so only pooled samples (routing's) and
canaries are timed so; fresh ones still count the wait.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson

from gateway import read_lag
from gateway.lag_timeout import judged_timeout
from gateway.signals.errors import SignalError, SignalErrorKind
from gateway.signals.http import NO_CLIENT_TIMEOUT, classify, read_bounded

MAX_PROBE_BODY_BYTES = 256 * 1024
MAX_CANARY_BODY_BYTES = 64 * 1024


@dataclass(slots=True)
class _ConnectTimer:
    started: float | None = None
    ended: float | None = None

    @property
    def connect_ms(self) -> float | None:
        if self.started is None or self.ended is None:
            return None
        return (self.ended - self.started) * 1000.0


async def _on_create_start(_s: aiohttp.ClientSession, ctx: SimpleNamespace, _p: Any) -> None:
    timer = ctx.trace_request_ctx
    if isinstance(timer, _ConnectTimer):
        timer.started = time.perf_counter()


async def _on_create_end(_s: aiohttp.ClientSession, ctx: SimpleNamespace, _p: Any) -> None:
    timer = ctx.trace_request_ctx
    if isinstance(timer, _ConnectTimer):
        timer.ended = time.perf_counter()


def connect_tracing() -> aiohttp.TraceConfig:
    """Trace hooks that time connection set-up; pass to every probing session."""
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(_on_create_start)
    trace.on_connection_create_end.append(_on_create_end)
    return trace


@dataclass(frozen=True, slots=True)
class TimedRequest:
    status: int
    total_ms: float  # to the answer's arrival: its wait to be read is left out
    connect_ms: float | None  # None: the request reused a pooled connection


def _tcp_socket(response: aiohttp.ClientResponse) -> read_lag.TcpSocket | None:
    """The socket ``response`` came on. aiohttp releases the connection (``response.connection``
    is None) as soon as a small body is in, before the caller reads it; the protocol it keeps
    still holds the transport. Not public: without it, no answer's wait is left out."""
    protocol = getattr(response, "_protocol", None)
    transport = getattr(protocol, "transport", None)
    return None if transport is None else transport.get_extra_info("socket")


def _arrived_ms(started: float, sock: read_lag.TcpSocket | None) -> float:
    """Milliseconds from ``started`` to the arrival of the bytes just read (their wait to be
    read left out). Called with no await since the read, so the socket is still ours."""
    return (time.perf_counter() - started) * 1000.0 - read_lag.unread_ms(sock)


async def timed_get(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    timeout_s: float,
    tls: ssl.SSLContext | bool = True,
) -> TimedRequest | SignalError:
    """GET ``url`` and read the (bounded) body, timing the whole and any connection set-up."""
    timer = _ConnectTimer()
    started = time.perf_counter()
    try:
        async with (
            judged_timeout(timeout_s),
            session.get(
                url, headers=headers, timeout=NO_CLIENT_TIMEOUT, trace_request_ctx=timer, ssl=tls
            ) as response,
        ):
            sock = _tcp_socket(response)
            body = await read_bounded(response, MAX_PROBE_BODY_BYTES)
            total_ms = _arrived_ms(started, sock)
            if isinstance(body, SignalError):
                return body
            status = response.status
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        return classify(exc)
    return TimedRequest(status, total_ms, timer.connect_ms)


def _first_token_seen(line: bytes) -> bool:
    """Whether one SSE line carries the first generated token (not just the role preamble)."""
    if not line.startswith(b"data:"):
        return False
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return True
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    choice = choices[0]
    delta = choice.get("delta")
    content = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return bool(content) or choice.get("finish_reason") is not None


def canary_body(model: str, prompt: str) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 1,
            "stream": True,
            "temperature": 0,
        }
    )


async def timed_canary(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    body: bytes,
    timeout_s: float,
    tls: ssl.SSLContext | bool = True,
) -> float | SignalError:
    """Stream a 1-token generation; return the time to its first token's arrival in ms."""
    started = time.perf_counter()
    read = 0
    try:
        async with (
            judged_timeout(timeout_s),
            session.post(
                url,
                data=body,
                headers={**headers, "Content-Type": "application/json"},
                timeout=NO_CLIENT_TIMEOUT,
                ssl=tls,
            ) as response,
        ):
            if response.status != 200:
                message = f"canary answered HTTP {response.status}"
                return SignalError(SignalErrorKind.HTTP_STATUS, message)
            sock = _tcp_socket(response)
            async for line in response.content:
                if _first_token_seen(line.strip()):
                    return _arrived_ms(started, sock)
                read += len(line)
                if read > MAX_CANARY_BODY_BYTES:
                    break
    except (aiohttp.ClientError, TimeoutError, ConnectionError, ValueError) as exc:
        return classify(exc)
    return SignalError(SignalErrorKind.MALFORMED, "canary stream ended without a token")
