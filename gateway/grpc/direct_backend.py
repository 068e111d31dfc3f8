"""An :class:`InferenceBackend` that calls one OpenAI-compatible HTTP server directly.

No routing, no fallback: the gRPC door in front of a single engine. It is the baseline the
overhead benchmark compares the full gateway against, and what the servicer's tests run on
(a real emulated backend over real sockets).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import aiohttp
import orjson

from gateway.lifecycle.seam import (
    BackendEvent,
    BackendRequest,
    ModelEntry,
    StreamChunk,
    StreamEnded,
    StreamFailed,
    StreamOpened,
)
from gateway.scrub import connect_words, scrub, status_words
from gateway.sse import SseSplitter

_MAX_ERROR_BODY = 64 * 1024


_CLIENT_FAULT_STATUSES = frozenset({400, 413, 422})


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    try:
        value = response.headers.get("Retry-After")
        return float(value) if value is not None else None
    except ValueError:
        return None


def _error_fields(body: bytes) -> tuple[str | None, str | None]:
    """(message, code) from ``{"error": {...}}`` or vLLM's flat error object."""
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    error = parsed.get("error", parsed) if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        return None, None
    code = error.get("code")
    message = error.get("message")
    return (scrub(str(message)) if message else None), (code if isinstance(code, str) else None)


async def _status_failure(response: aiohttp.ClientResponse) -> StreamFailed:
    message, code = _error_fields(await response.content.read(_MAX_ERROR_BODY))
    if response.status not in _CLIENT_FAULT_STATUSES:  # only the client's own fault is told
        message = None
    return StreamFailed(
        response.status,
        message or status_words(response.status),
        code,
        _retry_after(response),
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000.0:.1f}"


def _ended(sent_at: float) -> StreamEnded:
    return StreamEnded((("server-timing", f"total;dur={_ms(time.perf_counter() - sent_at)}"),))


class DirectHttpBackend:
    """``base_url`` is the server root (``http://host:port``); paths ``/v1/...`` are appended."""

    def __init__(self, base_url: str, name: str = "direct") -> None:
        self.base_url = base_url.rstrip("/")
        self.name = name
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def list_models(self) -> Sequence[ModelEntry]:
        async with self._client().get(self.base_url + "/v1/models") as response:
            response.raise_for_status()
            payload: Any = orjson.loads(await response.read())
        return [
            ModelEntry(m["id"], int(m.get("created") or 0), str(m.get("owned_by") or ""))
            for m in payload.get("data", ())
        ]

    async def stream(self, request: BackendRequest) -> AsyncGenerator[BackendEvent, None]:
        headers = {"Content-Type": "application/json", "X-Request-Id": request.request_id}
        headers.update(request.forward_metadata)
        timeout = aiohttp.ClientTimeout(total=request.timeout_s)
        sent_at = time.perf_counter()
        opened = False
        try:
            async with self._client().post(
                self.base_url + request.kind.path,
                data=request.body,
                headers=headers,
                timeout=timeout,
            ) as response:
                if response.status != 200:
                    yield await _status_failure(response)
                    return
                if response.content_type == "application/json":  # embeddings: one answer
                    answer = orjson.loads(await response.read())
                    yield StreamOpened((("x-meridian-route", f"backend={self.name}"),))
                    yield StreamChunk(answer)
                    yield _ended(sent_at)
                    return
                splitter = SseSplitter()
                async for raw in response.content.iter_any():
                    for event in splitter.feed(raw):
                        if event.data is None:
                            continue
                        if event.is_done:
                            yield _ended(sent_at)
                            return
                        data = orjson.loads(event.data)
                        if "error" in data:
                            message, code = _error_fields(event.data)
                            yield StreamFailed(502, message or "backend error event", code)
                            return
                        if not opened:
                            opened = True
                            ttfb = time.perf_counter() - sent_at
                            yield StreamOpened(
                                (
                                    ("x-meridian-route", f"backend={self.name}"),
                                    ("server-timing", f"upstream_ttfb;dur={_ms(ttfb)}"),
                                )
                            )
                        yield StreamChunk(data)
                        if data.get("type") == "message_stop":  # Messages ends without [DONE]
                            yield _ended(sent_at)
                            return
                yield StreamFailed(502, "backend closed the stream before [DONE]", "stream_broken")
        except TimeoutError:
            yield StreamFailed(504, "backend did not finish within the deadline", "timeout")
        except (aiohttp.ClientError, orjson.JSONDecodeError, ValueError) as exc:
            status = 502 if opened else 503
            yield StreamFailed(status, f"backend failed: {connect_words(exc)}", "upstream_error")
