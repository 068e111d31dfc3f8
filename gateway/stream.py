"""One upstream exchange after it produced its first token (or its whole non-streaming body).

:class:`OpenedStream` owns the upstream response until :meth:`OpenedStream.finish`; it yields the
remaining SSE events with the inter-token timeout applied, keeps the numbers the end-of-stream
summary needs, and turns a broken upstream into :class:`StreamBroken` — never a silent end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from gateway.errors import ApiError
from gateway.sse import SseEvent, SseSplitter
from gateway.timing import StreamStats, TimingEntry
from routing.types import BackendSpec


@dataclass(frozen=True, slots=True)
class RouteInfo:
    backend: str
    region: str
    kind: str
    attempts: int
    predicted_ttft_ms: float | None = None

    def header(self) -> str:
        text = (
            f"region={self.region}; backend={self.backend}; kind={self.kind}; "
            f"attempts={self.attempts}"
        )
        if self.predicted_ttft_ms is not None:
            text += f"; predicted_ttft_ms={self.predicted_ttft_ms:.1f}"
        return text


class StreamBroken(Exception):
    """The upstream failed after the client already got tokens."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.error = ApiError(502, message, "server_error", kind)


def event_carries_output(event: SseEvent) -> tuple[bool, dict[str, Any] | None]:
    """Whether an event is the first token (content, text, tool call or a finish)."""
    if event.data is None:
        return False, None
    if event.is_done:
        return True, None
    try:
        obj = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        return False, None
    if not isinstance(obj, dict):
        return False, None
    if "error" in obj:
        return True, obj
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason") is not None or choice.get("text"):
            return True, obj
        delta = choice.get("delta")
        if isinstance(delta, dict) and (
            delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content")
        ):
            return True, obj
    return False, obj


@dataclass(slots=True)
class OpenedStream:
    spec: BackendSpec
    route: RouteInfo
    response: aiohttp.ClientResponse
    stats: StreamStats
    entries: list[TimingEntry]  # this hop's timing up to the first token, hop entries included
    first_events: list[SseEvent] = field(default_factory=list)
    body: bytes | None = None  # a non-streaming response's whole body
    splitter: SseSplitter | None = None
    inter_token_s: float = 60.0
    deadline: float | None = None  # perf_counter() time by which the whole request must end
    usage: dict[str, Any] | None = None
    upstream_ttfb_ms: float | None = None  # request sent -> first token: the backend's share
    predicted_terms_ms: Mapping[str, float] = field(default_factory=dict)
    saw_done: bool = False
    finished: bool = False

    def note(self, event: SseEvent, obj: dict[str, Any] | None, carries: bool) -> None:
        if carries and not event.is_done:
            self.stats.on_token_event(time.perf_counter())
        if event.is_done:
            self.saw_done = True
        if obj is not None and isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]

    async def all_events(self) -> AsyncIterator[SseEvent]:
        """Every event of the stream: those read with the first token, then the rest."""
        for event in self.first_events:
            yield event
        if not self.saw_done:
            async for event in self.events():
                yield event

    async def events(self) -> AsyncIterator[SseEvent]:
        """The events after the first token, as they arrive."""
        assert self.splitter is not None
        content = self.response.content
        while not self.saw_done:
            timeout = self.inter_token_s
            if self.deadline is not None:
                timeout = min(timeout, self.deadline - time.perf_counter())
            try:
                async with asyncio.timeout(max(0.0, timeout)):
                    chunk = await content.readany()
            except TimeoutError:
                raise StreamBroken(
                    "upstream_stalled", f"upstream sent nothing for {timeout:.1f}s mid-stream"
                ) from None
            except (aiohttp.ClientError, OSError) as exc:
                raise StreamBroken(
                    "upstream_disconnected", f"upstream connection broke mid-stream: {exc!r}"
                ) from None
            try:
                events = self.splitter.feed(chunk) if chunk else self.splitter.flush()
            except ValueError as exc:
                raise StreamBroken("upstream_malformed", str(exc)) from None
            for event in events:
                carries, obj = event_carries_output(event)
                self.note(event, obj, carries)
                yield event
            if not chunk and not self.saw_done:
                raise StreamBroken("upstream_truncated", "upstream stream ended without [DONE]")

    def output_tokens(self) -> int:
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return int(self.usage["completion_tokens"])
        return self.stats.output_events

    def cached_tokens(self) -> int | None:
        details = (self.usage or {}).get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            return int(details["cached_tokens"])
        return None

    def summary(self, now: float) -> dict[str, Any]:
        """End-of-stream timing, the JSON carried by the final SSE comment line."""
        p50, p99, worst = self.stats.itl_percentiles()
        ttft = (
            (self.stats.first_token_at - self.stats.started_at) * 1000.0
            if self.stats.first_token_at is not None
            else None
        )
        return {
            "backend": self.route.backend,
            "region": self.route.region,
            "attempts": self.route.attempts,
            "ttft_ms": _round(ttft),
            "itl_p50_ms": _round(p50),
            "itl_p99_ms": _round(p99),
            "itl_max_ms": _round(worst),
            "output_tokens": self.output_tokens(),
            "e2e_ms": _round((now - self.stats.started_at) * 1000.0),
        }

    def close(self) -> None:
        """Drop the upstream connection unless the exchange completed cleanly."""
        if self.finished:
            return
        self.finished = True
        if self.body is not None or self.saw_done:
            self.response.release()
        else:
            self.response.close()


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
