"""One HTTP request as the door's runner (:mod:`gateway.doors.sse_door`) sees it, whichever
server read it: :class:`AiohttpRequest` on aiohttp's web server (every route), or
:class:`gateway.lean_door.request.LeanRequest` on the lean door's own connections (the
streaming endpoints' usual requests: :mod:`gateway.lean_door`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from aiohttp import web

from gateway.auth.keys import Principal
from gateway.auth.wiring import principal_of
from gateway.chain.hop import HOP_HEADERS
from gateway.errors import ApiError
from gateway.http_socket.policy import DOOR, body_too_slow
from gateway.http_socket.protocol import DoorRequestHandler, head_arrival
from gateway.lag_timeout import LagForgivingTimeout
from gateway.quota.limiter import QUOTAS, Quotas
from gateway.relay import Relay
from gateway.sse_writer import SseSink, SseWriter
from gateway.state_keys import RELAY


class DoorHttp(ABC):
    """What the runner reads from a request and how it answers it."""

    relay: Relay
    quotas: Quotas
    received_at: float  # the read that completed the head (perf_counter)
    remote: str | None  # the peer's address, as the transport saw it

    @abstractmethod
    def header(self, name: str) -> str | None:
        """A request header (case-insensitive), the first if repeated."""

    @abstractmethod
    def headers(self) -> Mapping[str, str]:
        """Every request header (case-insensitive), for the objective headers."""

    @abstractmethod
    def header_all(self, name: str) -> Sequence[str] | None:
        """Every value of a repeated header, None if absent."""

    @abstractmethod
    def principal(self) -> Principal:
        """Who the request acts for, decided from its key (never from a client header)."""

    @abstractmethod
    async def read_body(self) -> bytes:
        """The whole body; :class:`ApiError` 413 (too large) or 408 (too slow)."""

    @abstractmethod
    def sse(self) -> SseSink:
        """A new SSE response to this request."""

    def passed_through(self) -> dict[str, str]:
        # gateway/chain/hop.py replaces them with this hop's. One comprehension over the
        # case-insensitive mapping, not a ``header()`` call per name.
        headers = self.headers()
        return {name: value for name in HOP_HEADERS if (value := headers.get(name))}


def body_too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"request body is larger than the {limit}-byte limit",
        "invalid_request_error",
        "request_too_large",
    )


class AiohttpRequest(DoorHttp):
    """A request aiohttp's web server read, after the middlewares (auth set its principal)."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.received_at = head_arrival(request)  # before aiohttp and the middlewares
        self.relay = request.app[RELAY]
        self.quotas = request.app[QUOTAS]
        self.remote = request.remote

    def header(self, name: str) -> str | None:
        return self.request.headers.get(name)

    def headers(self) -> Mapping[str, str]:
        return self.request.headers

    def header_all(self, name: str) -> Sequence[str] | None:
        return self.request.headers.getall(name, None)

    def principal(self) -> Principal:
        return principal_of(self.request)

    def sse(self) -> SseSink:
        return SseWriter(self.request, self.relay.config.streams)

    async def read_body(self) -> bytes:
        request = self.request
        limit = self.relay.config.limits.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise body_too_large(limit)
        timeout_s = self.relay.config.door.body_timeout_s
        protocol = request.protocol
        handler = protocol if isinstance(protocol, DoorRequestHandler) else None
        try:
            async with LagForgivingTimeout(timeout_s):
                if handler is not None:
                    handler.reading_body = True
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise body_too_large(limit) from None
        except TimeoutError:
            request.app[DOOR].metrics.timeouts.labels("body").inc()
            if handler is not None:
                handler.linger_briefly()
            raise body_too_slow(timeout_s) from None
        finally:
            if handler is not None:
                handler.reading_body = False
