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
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson

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
    total_ms: float
    connect_ms: float | None  # None: the request reused a pooled connection


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
            body = await read_bounded(response, MAX_PROBE_BODY_BYTES)
            if isinstance(body, SignalError):
                return body
            status = response.status
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        return classify(exc)
    return TimedRequest(status, (time.perf_counter() - started) * 1000.0, timer.connect_ms)


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
    """Stream a 1-token generation; return the time to its first token in ms."""
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
            async for line in response.content:
                if _first_token_seen(line.strip()):
                    return (time.perf_counter() - started) * 1000.0
                read += len(line)
                if read > MAX_CANARY_BODY_BYTES:
                    break
    except (aiohttp.ClientError, TimeoutError, ConnectionError, ValueError) as exc:
        return classify(exc)
    return SignalError(SignalErrorKind.MALFORMED, "canary stream ended without a token")
