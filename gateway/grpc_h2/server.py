"""The h2 engine's server: a listening socket on the running event loop and the method table.

It takes the same registrations as a ``grpc.aio.Server`` (``add_generic_rpc_handlers``,
``add_registered_method_handlers`` with ``grpc.RpcMethodHandler`` values), so the generated
``add_*Servicer_to_server`` functions, the Inference registration
(:func:`gateway.grpc.strict_decode.add_inference_servicer`), health and reflection register on
it unchanged, and the same servicer objects serve on either engine.

``stop(grace)``: no new connections, new streams refused (REFUSED_STREAM, which clients retry
elsewhere), in-flight calls get ``grace`` seconds, the rest end UNAVAILABLE; then GOAWAY and
close.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.grpc_h2.call import Cancel
from gateway.grpc_h2.connection import GrpcConnection
from gateway.grpc_h2.limits import ConnectionCaps, H2Limits


@dataclass(frozen=True, slots=True)
class _CallDetails:
    """``grpc.HandlerCallDetails`` for a generic handler's lookup."""

    method: str
    invocation_metadata: tuple[tuple[str, str | bytes], ...] = ()


_LISTEN_BACKLOG = 4096  # as grpc.aio's listener and the HTTP one (asyncio's default is 100)


def _uncounted(reason: str) -> None:
    pass


class H2GrpcServer:
    def __init__(
        self,
        limits: H2Limits | None = None,
        caps: ConnectionCaps | None = None,
        closed: Callable[[str], None] | None = None,
    ) -> None:
        self.limits = limits or H2Limits()
        self.caps = caps  # None: connections are not capped
        # Told each time the server closes a connection itself, with the reason.
        self.closed = closed or _uncounted
        self.connections: set[GrpcConnection] = set()
        self.stopping = False
        self.transport_writes = 0  # every transport.write, all connections (benchmarks, tests)
        self._methods: dict[str, Any] = {}
        self._generic: list[Any] = []
        self._server: asyncio.Server | None = None
        self._idle = asyncio.Event()

    # -- registration (grpc.aio.Server's own method names) ------------------------------------

    def add_generic_rpc_handlers(self, handlers: Iterable[Any]) -> None:
        self._generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, Any]) -> None:
        for name, handler in handlers.items():
            self._methods[f"/{service}/{name}"] = handler

    def method(self, path: str) -> Any:
        """The ``grpc.RpcMethodHandler`` for ``/package.Service/Method``, or None."""
        handler = self._methods.get(path)
        if handler is None:
            for generic in self._generic:
                handler = generic.service(_CallDetails(path))
                if handler is not None:
                    self._methods[path] = handler  # a generic answer is fixed per path
                    break
        return handler

    # -- serving ------------------------------------------------------------------------------

    async def start(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        *,
        reuse_port: bool = False,
    ) -> int:
        """Listen on the running loop; returns the bound port. ``reuse_port``: SO_REUSEPORT (the
        workers of ``meridian serve --workers N`` share the port)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: GrpcConnection(self),
            host,
            port,
            ssl=ssl_context,
            reuse_port=reuse_port,
            backlog=_LISTEN_BACKLOG,
        )
        bound: int = self._server.sockets[0].getsockname()[1]
        return bound

    def active_calls(self) -> int:
        return sum(len(connection.calls) for connection in self.connections)

    def call_ended(self) -> None:
        if self.stopping and self.active_calls() == 0:
            self._idle.set()

    async def stop(self, grace: float | None) -> None:
        self.stopping = True
        if self._server is not None:
            self._server.close()
        if self.active_calls() and grace:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace)
        tasks = []
        for connection in list(self.connections):
            for call in list(connection.calls.values()):
                call.cancel(Cancel.SHUTDOWN)
                if call.task is not None:
                    tasks.append(call.task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for connection in list(self.connections):
            connection.goaway()
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()
