"""Pooled HTTP clients to OpenAI-compatible backends, with connection-level timing.

One ``aiohttp.ClientSession`` per backend keeps keep-alive connections warm. A ``TraceConfig``
records how long the connection took (zero when a pooled one was reused) — the raw material of
the ``upstream_connect`` timing entry — and whether the connection was reused, which decides the
one retry the pool does by itself: a pooled connection the backend had already closed (many
servers close after a streamed response while advertising keep-alive) fails before anything
was received, so the request is resent once on a fresh connection, invisibly to the client.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace

import aiohttp
from aiohttp.abc import AbstractResolver

from gateway.auth.tls import backend_context
from gateway.config import BackendConfig, TimeoutsConfig

# Errors that mean "the pooled connection was dead", not "the backend failed".
_STALE_CONNECTION_ERRORS = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
_MAX_STALE_RETRIES = 2


@dataclass(slots=True)
class ConnectionTiming:
    """Filled in by trace hooks while one request is sent."""

    connect_ms: float = 0.0
    reused: bool = False
    _connect_started: float = field(default=0.0, repr=False)


async def _on_connection_create_start(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
) -> None:
    timing: ConnectionTiming | None = ctx.trace_request_ctx
    if timing is not None:
        timing._connect_started = time.perf_counter()


async def _on_connection_create_end(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
) -> None:
    timing: ConnectionTiming | None = ctx.trace_request_ctx
    if timing is not None:
        timing.connect_ms += (time.perf_counter() - timing._connect_started) * 1000.0
        timing.reused = False


async def _on_connection_reuseconn(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
) -> None:
    timing: ConnectionTiming | None = ctx.trace_request_ctx
    if timing is not None:
        timing.reused = True


def _trace_config() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(_on_connection_create_start)
    trace.on_connection_create_end.append(_on_connection_create_end)
    trace.on_connection_reuseconn.append(_on_connection_reuseconn)
    return trace


class UpstreamClient:
    """Sends requests to one backend over its own connection pool.

    ``read_bufsize`` bounds what one response may buffer in the gateway: aiohttp stops reading
    the upstream socket when twice that is waiting unread, so a stream whose client is slow
    pushes back on its backend through TCP instead of filling the gateway's memory.
    """

    def __init__(
        self,
        backend: BackendConfig,
        timeouts: TimeoutsConfig,
        read_bufsize: int = 2**16,
        resolver: AbstractResolver | None = None,
    ) -> None:
        """``resolver``: backend host names to pinned addresses (gateway/pinning)."""
        self.backend = backend
        self._resolver = resolver
        self._ssl = backend_context(backend.name, backend.tls)
        self.base_url = backend.base_url()
        self._api_key = backend.api_key.resolve() if backend.api_key is not None else None
        self._timeouts = timeouts
        self.read_bufsize = read_bufsize
        self._session: aiohttp.ClientSession | None = None
        # Responses handed out and maybe still read: closing the session drops their readers
        # without waking them (aiohttp forgets the payload before the connection is lost), so
        # close() fails them first — a request is never left waiting on a closed pool.
        self._live: weakref.WeakSet[aiohttp.ClientResponse] = weakref.WeakSet()

    def same_settings(self, backend: BackendConfig, timeouts: TimeoutsConfig, bufsize: int) -> bool:
        return (
            self.backend == backend
            and self._timeouts.connect_s == timeouts.connect_s
            and self.read_bufsize == bufsize
        )

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self.backend.max_connections,
                keepalive_timeout=30.0,
                enable_cleanup_closed=True,
                resolver=self._resolver,
                ssl=self._ssl,
                use_dns_cache=self._resolver is None,  # pins are a dict already, and move
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trace_configs=[_trace_config()],
                auto_decompress=False,
                skip_auto_headers=("User-Agent",),
                read_bufsize=self.read_bufsize,
            )
        return self._session

    def _headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "User-Agent": "meridian"}
        headers.update(extra)
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def post(
        self, path: str, body: bytes, headers: Mapping[str, str], timing: ConnectionTiming
    ) -> aiohttp.ClientResponse:
        """Send a POST and return once response headers are in; the caller reads and closes."""
        session = self._ensure_session()
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._timeouts.connect_s, connect=self._timeouts.connect_s
        )
        url = self.base_url + path
        all_headers = self._headers(headers)
        stale_retries = 0
        while True:
            timing.reused = False
            try:
                response = await session.post(
                    url, data=body, headers=all_headers, timeout=timeout, trace_request_ctx=timing
                )
                self._live.add(response)
                return response
            except _STALE_CONNECTION_ERRORS:
                if not timing.reused or stale_retries >= _MAX_STALE_RETRIES:
                    raise
                stale_retries += 1

    async def get(self, path: str, timeout_s: float) -> aiohttp.ClientResponse:
        session = self._ensure_session()
        return await session.get(
            self.base_url + path,
            headers=self._headers({}),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        )

    async def close(self) -> None:
        for response in list(self._live):
            if response.connection is not None:  # not yet released: someone may be reading
                response.content.set_exception(
                    aiohttp.ClientConnectionError("the upstream client was closed")
                )
        self._live.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None


class UpstreamPool:
    """The clients for every configured backend, by name.

    ``reuse``: a previous pool (before a reload) whose clients are kept, warm connections and
    in-flight streams included, for every backend whose settings did not change.
    """

    def __init__(
        self,
        backends: list[BackendConfig],
        timeouts: TimeoutsConfig,
        read_bufsize: int = 2**16,
        reuse: UpstreamPool | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        old = reuse.clients if reuse is not None else {}
        self.clients: dict[str, UpstreamClient] = {}
        for backend in backends:
            kept = old.get(backend.name)
            if kept is not None and kept.same_settings(backend, timeouts, read_bufsize):
                self.clients[backend.name] = kept
            else:
                self.clients[backend.name] = UpstreamClient(
                    backend, timeouts, read_bufsize, resolver
                )

    def not_in(self, other: UpstreamPool) -> list[UpstreamClient]:
        """This pool's clients that ``other`` does not share: what a reload retires."""
        shared = {id(c) for c in other.clients.values()}
        return [c for c in self.clients.values() if id(c) not in shared]

    def __getitem__(self, name: str) -> UpstreamClient:
        return self.clients[name]

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.clients.values()), return_exceptions=True)
