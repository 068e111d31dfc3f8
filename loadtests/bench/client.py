"""One streamed completion over aiohttp, timed chunk by chunk with ``time.perf_counter()``.

Kept lean on purpose: at a thousand concurrent streams on two cores, every microsecond spent
per chunk shows up as measured ITL that the server never caused. The per-chunk work is one
clock read, the SSE split and one ``orjson.loads`` per event.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from loadtests.bench.records import ErrorKind
from loadtests.bench.sse import SseComment, SseEvent, SseParser

ROUTE_HEADER = "X-Meridian-Route"
DETAIL_LIMIT = 200  # characters of a server's error text kept: enough to act on, no prompt dumps


def endpoint_url(base_url: str, api: str) -> str:
    """``http://host:port`` or ``http://host:port/v1`` -> the chat or completions endpoint."""
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return f"{base}/chat/completions" if api == "chat" else f"{base}/completions"


@dataclass(frozen=True)
class Exchange:
    """What the wire showed for one request; absolute ``perf_counter`` times."""

    sent: float
    ended: float
    token_times: tuple[float, ...]
    status: int | None
    error: ErrorKind | None
    detail: str
    usage: dict[str, Any] | None
    route: str | None
    server_timing: str | None
    final_comment: str | None
    reply: str


class _Stream:
    """Accumulates one response's events; mutable by design, lives for one request only."""

    def __init__(self, keep_text: bool) -> None:
        self.parser = SseParser()
        self.token_times: list[float] = []
        self.text: list[str] | None = [] if keep_text else None
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.error: ErrorKind | None = None
        self.detail = ""
        self.final_comment: str | None = None

    def consume(self, items: list[SseEvent | SseComment], now: float) -> None:
        for item in items:
            if isinstance(item, SseComment):
                # Meridian's timings: ``: meridian-timing {...}``; keep-alives carry no JSON.
                if "{" in item.text:
                    self.final_comment = item.text
            elif item.data == "[DONE]":
                self.done = True
            elif item.data:
                self._event(item.data, now)

    def _event(self, data: str, now: float) -> None:
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.fail(ErrorKind.BAD_RESPONSE, "a stream event is not JSON")
            return
        if not isinstance(payload, dict):
            self.fail(ErrorKind.BAD_RESPONSE, "a stream event is not a JSON object")
            return
        if "error" in payload:
            self.fail(ErrorKind.STREAM_ERROR, str(payload["error"])[:DETAIL_LIMIT])
            return
        if payload.get("usage"):
            self.usage = payload["usage"]
        choices = payload.get("choices")
        if not choices:
            return
        choice = choices[0]  # the bench asks for one completion (n=1)
        delta = choice.get("delta")
        content = delta.get("content") if delta is not None else choice.get("text")
        if content:
            self.token_times.append(now)
            if self.text is not None:
                self.text.append(content)
        if choice.get("finish_reason"):
            self.done = True

    def fail(self, kind: ErrorKind, detail: str) -> None:
        if self.error is None:
            self.error, self.detail = kind, detail


async def stream_completion(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    keep_text: bool = False,
) -> Exchange:
    """Send one streamed request and time it; never raises for what the server or network did."""
    stream = _Stream(keep_text)
    status: int | None = None
    route = server_timing = None
    sent = time.perf_counter()
    try:
        async with session.post(url, data=orjson.dumps(body), headers=headers) as response:
            status = response.status
            route = response.headers.get(ROUTE_HEADER)
            server_timing = response.headers.get("Server-Timing")
            if status >= 300:
                text = await response.text(errors="replace")
                stream.fail(ErrorKind.HTTP_STATUS, text[:DETAIL_LIMIT])
            else:
                await _read_stream(response, stream)
    except TimeoutError:
        stream.fail(ErrorKind.TIMEOUT, "no complete response within the request timeout")
    except (aiohttp.ClientError, OSError) as error:
        kind = ErrorKind.CONNECT if status is None else ErrorKind.STREAM_BROKEN
        stream.fail(kind, f"{type(error).__name__}: {error}"[:DETAIL_LIMIT])
    ended = time.perf_counter()
    if stream.error is None and status is not None and not stream.done:
        stream.fail(ErrorKind.STREAM_BROKEN, "stream ended without [DONE] or a finish_reason")
    if stream.error is None and status is not None and not stream.token_times:
        stream.fail(ErrorKind.NO_TOKENS, "the stream completed without any token")
    return Exchange(
        sent=sent,
        ended=ended,
        token_times=tuple(stream.token_times),
        status=status,
        error=stream.error,
        detail=stream.detail,
        usage=stream.usage,
        route=route,
        server_timing=server_timing,
        final_comment=stream.final_comment,
        reply="".join(stream.text) if stream.text is not None else "",
    )


async def _read_stream(response: aiohttp.ClientResponse, stream: _Stream) -> None:
    parser = stream.parser
    clock = time.perf_counter
    read = response.content.readany  # cheaper than the async iterator at 25k chunks/s
    while chunk := await read():
        arrived = clock()  # before parsing: the gap measured is the network's, not ours
        stream.consume(parser.feed(chunk), arrived)
    stream.consume(parser.close(), clock())
