"""Pooled HTTP clients to OpenAI-compatible backends, with connection-level timing.

One :class:`gateway.http_client.ConnectionPool` per backend keeps keep-alive connections warm;
a request is one pre-built header block plus the body, written in one ``send``. How long the
connection took (zero when a pooled one was reused) is the raw material of the
``upstream_connect`` timing entry; whether it was reused decides the one retry the pool does by
itself: a pooled connection the backend had already closed (many servers close after a
streamed response while advertising keep-alive) fails before anything was received, so the
request is resent once on a fresh connection, invisibly to the client.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from gateway.auth.tls import backend_context
from gateway.config import BackendConfig, TimeoutsConfig
from gateway.http_client import ConnectionPool, header_block
from gateway.upstream_response import UpstreamResponse

# Errors that mean "the pooled connection was dead", not "the backend failed".
_STALE_CONNECTION_ERRORS = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
_MAX_STALE_RETRIES = 2


@dataclass(slots=True)
class ConnectionTiming:
    """Filled in while one request is sent."""

    connect_ms: float = 0.0
    reused: bool = False


class UpstreamClient:
    """Sends requests to one backend over its own connection pool.

    ``read_bufsize`` bounds what one response may buffer in the gateway: the upstream socket is
    not read while twice that is waiting unread, so a stream whose client is slow pushes back
    on its backend through TCP instead of filling the gateway's memory.
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
        url = URL(self.base_url)
        self._base_path = url.raw_path.rstrip("/")
        api_key = backend.api_key.resolve() if backend.api_key is not None else None
        fixed = {"Host": _host_header(url), "Content-Type": "application/json"}
        fixed["User-Agent"] = "meridian"
        if api_key is not None:
            fixed["Authorization"] = f"Bearer {api_key}"
        self._fixed = fixed
        self._has_key = api_key is not None
        self._fixed_block = header_block(fixed)
        self._timeouts = timeouts
        self.read_bufsize = read_bufsize
        self._pool: ConnectionPool | None = None
        # Responses handed out and maybe still read: close() fails them first — a request is
        # never left waiting on a closed pool.
        self._live: weakref.WeakSet[UpstreamResponse] = weakref.WeakSet()

    def same_settings(self, backend: BackendConfig, timeouts: TimeoutsConfig, bufsize: int) -> bool:
        return (
            self.backend == backend
            and self._timeouts.connect_s == timeouts.connect_s
            and self.read_bufsize == bufsize
        )

    def _ensure_pool(self) -> ConnectionPool:
        if self._pool is None:
            url = URL(self.base_url)
            self._pool = ConnectionPool(
                url, self.backend.max_connections, self._ssl, self._resolver
            )
        return self._pool

    def _request(self, path: str, body: bytes, extra: Mapping[str, str]) -> bytes:
        """The whole request in one buffer: the fixed block, what this request adds (a name
        the fixed block has is taken from ``extra``), the length and the body."""
        fixed = self._fixed_block
        # One set comprehension, not a generator resumed per header (each resumption is a call).
        if extra and not self._fixed.keys().isdisjoint({name.title() for name in extra}):
            merged = {**self._fixed}
            for name, value in extra.items():
                key = name.title() if name.title() in self._fixed else name
                if key != "Authorization" or not self._has_key:  # the backend's key wins
                    merged[key] = value
            fixed, extra = header_block(merged), {}
        head = b"POST %s HTTP/1.1\r\n" % (self._base_path + path).encode()
        length = b"Content-Length: %d\r\n\r\n" % len(body)
        return b"".join((head, fixed, header_block(extra), length, body))

    async def post(
        self, path: str, body: bytes, headers: Mapping[str, str], timing: ConnectionTiming
    ) -> UpstreamResponse:
        """Send a POST and return once response headers are in; the caller reads and closes."""
        pool = self._ensure_pool()
        request = self._request(path, body, headers)
        stale_retries = 0
        while True:
            conn, reused, connect_ms = await pool.acquire(self._timeouts.connect_s)
            timing.reused = reused
            timing.connect_ms += connect_ms
            response = conn.send(request, self.read_bufsize)
            try:
                await response.head()
            except _STALE_CONNECTION_ERRORS:
                response.close()
                if not reused or response.got_bytes or stale_retries >= _MAX_STALE_RETRIES:
                    raise
                stale_retries += 1
                continue
            except BaseException:
                response.close()
                raise
            self._live.add(response)
            return response

    async def close(self) -> None:
        for response in list(self._live):
            if response.connection is not None:  # not yet released: someone may be reading
                response.content.set_exception(
                    aiohttp.ClientConnectionError("the upstream client was closed")
                )
        self._live.clear()
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        await asyncio.sleep(0)  # the transports' close callbacks run


def _host_header(url: URL) -> str:
    host = url.raw_host or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return host if url.is_default_port() else f"{host}:{url.port}"


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
