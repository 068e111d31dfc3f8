"""The gRPC server: Inference + standard health + reflection, on the caller's event loop.

It runs in the same process and on the same (uv)loop as the aiohttp server: start it from an
aiohttp ``cleanup_ctx`` entry (:func:`grpc_cleanup_ctx`) or any ``async with``
(:func:`serving_grpc`). Draining flips the health service to NOT_SERVING first, so load
balancers stop sending new calls while in-flight streams get ``grace_s`` to finish.

Oversized messages are refused by gRPC itself with RESOURCE_EXHAUSTED ("received message larger
than max"); a request within the gRPC limit whose JSON body exceeds the HTTP door's limit gets
INVALID_ARGUMENT from the servicer.

Two engines serve the same servicers (``GrpcServerConfig.engine``): ``h2`` (the default,
:mod:`gateway.grpc_h2`: HTTP/2 in Python on the event loop itself, with no C-core poller thread
between the loop and each call's operations) and ``grpcio`` (grpc.aio).
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import grpc
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from gateway.grpc.reflection_v1 import enable_reflection
from gateway.grpc.servicer import InferenceServicer, ServicerLimits
from gateway.grpc.strict_decode import add_inference_servicer
from gateway.grpc_h2.limits import ConnectionCaps, H2Limits, LifetimeLimits
from gateway.lifecycle.seam import InferenceBackend
from gateway.listen_error import ListenerBindError
from proto.meridian.v1 import inference_pb2 as pb

log = logging.getLogger("meridian.grpc")

INFERENCE_SERVICE = pb.DESCRIPTOR.services_by_name["Inference"].full_name
OVERALL_HEALTH = ""  # the health service's name for "the whole server"
MiB = 1024 * 1024
GrpcEngine = Literal["grpcio", "h2"]


class _Engine(Protocol):
    async def stop(self, grace: float | None) -> Any: ...


@dataclass(frozen=True, slots=True)
class GrpcServerConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0 = ephemeral; the bound port is on RunningGrpcServer
    max_receive_message_bytes: int = 4 * MiB
    max_send_message_bytes: int = 16 * MiB
    grace_s: float = 5.0
    reflection: bool = True
    limits: ServicerLimits = field(default_factory=ServicerLimits)
    # listen.tls (gateway/auth/tls.py grpc_credentials); None: plaintext.
    credentials: grpc.ServerCredentials | None = None
    engine: GrpcEngine = "h2"  # as listen.grpc_engine's default
    # listen.tls for the h2 engine (ALPN h2 set on it); None: plaintext.
    ssl_context: ssl.SSLContext | None = None
    # Bind with SO_REUSEPORT: the workers of `meridian serve --workers N` share one gRPC port
    # (the supervisor holds it reserved), as they share the HTTP one.
    reuse_port: bool = False
    # The h2 engine's connections count against these (the HTTP door's caps); None: uncapped.
    # grpc.aio has no hook for that: it counts its own connections against the same total.
    connection_caps: ConnectionCaps | None = None
    # listen.grpc_connections: a connection's age and idleness (both engines).
    lifetime: LifetimeLimits = field(default_factory=LifetimeLimits)
    # Told why, each time the h2 engine closes a connection itself (a metric's counter).
    connection_closed: Callable[[str], None] | None = None

    def h2_limits(self) -> H2Limits:
        return H2Limits(
            self.max_receive_message_bytes, self.max_send_message_bytes, lifetime=self.lifetime
        )

    def channel_options(self) -> list[tuple[str, int]]:
        caps = self.connection_caps
        capped = (
            []
            if caps is None
            else [("grpc.max_allowed_incoming_connections", caps.max_connections)]
        )
        return [*self._fixed_options(), *self._lifetime_options(), *capped]

    def _lifetime_options(self) -> list[tuple[str, int]]:
        bounds = (
            ("grpc.max_connection_age_ms", self.lifetime.max_age_s),
            ("grpc.max_connection_age_grace_ms", self.lifetime.age_grace_s),
            ("grpc.max_connection_idle_ms", self.lifetime.max_idle_s),
        )
        return [(name, round(seconds * 1000)) for name, seconds in bounds if seconds is not None]

    def _fixed_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_receive_message_length", self.max_receive_message_bytes),
            ("grpc.max_send_message_length", self.max_send_message_bytes),
            # Streams are long-lived and proxies drop idle connections: keep them alive.
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.http2.max_pings_without_data", 0),
            # grpc turns SO_REUSEPORT on by default; said here so that both engines follow
            # reuse_port (a lone gateway's port is not silently shared with another process).
            ("grpc.so_reuseport", int(self.reuse_port)),
        ]


@dataclass
class RunningGrpcServer:
    server: _Engine  # grpc.aio.Server or gateway.grpc_h2.server.H2GrpcServer
    health: health.aio.HealthServicer
    host: str
    port: int
    grace_s: float

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    async def drain(self) -> None:
        """Report NOT_SERVING for every service from now on (new calls are still accepted)."""
        await self.health.enter_graceful_shutdown()

    async def close(self, grace_s: float | None = None) -> None:
        await self.drain()
        await self.server.stop(self.grace_s if grace_s is None else grace_s)


async def start_grpc_server(
    backend: InferenceBackend, config: GrpcServerConfig | None = None
) -> RunningGrpcServer:
    """Start serving on the running event loop; returns once the port is bound."""
    config = config or GrpcServerConfig()
    where = f"{config.host}:{config.port}"
    if config.engine == "h2":
        from gateway.grpc_h2.server import H2GrpcServer  # loads h2 only when chosen

        h2_server = H2GrpcServer(
            config.h2_limits(), config.connection_caps, config.connection_closed
        )
        health_servicer = _register(h2_server, backend, config)
        try:
            port = await h2_server.start(
                config.host, config.port, config.ssl_context, reuse_port=config.reuse_port
            )
        except OSError as exc:
            raise ListenerBindError(where, "listen.grpc_port", exc.errno) from exc
        server: _Engine = h2_server
    else:
        aio_server = grpc.aio.server(options=config.channel_options())
        health_servicer = _register(aio_server, backend, config)
        try:  # grpc says a failed bind with RuntimeError (or a port of 0), never the errno
            if config.credentials is None:
                port = aio_server.add_insecure_port(where)
            else:
                port = aio_server.add_secure_port(where, config.credentials)
        except RuntimeError as exc:
            raise ListenerBindError(where, "listen.grpc_port", _bind_errno(config)) from exc
        if port == 0:
            raise ListenerBindError(where, "listen.grpc_port", _bind_errno(config))
        await aio_server.start()
        server = aio_server
    for service in (OVERALL_HEALTH, INFERENCE_SERVICE):
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    log.info("gRPC (%s) serving on %s:%d", config.engine, config.host, port)
    return RunningGrpcServer(server, health_servicer, config.host, port, config.grace_s)


def _bind_errno(config: GrpcServerConfig) -> int | None:
    """Why grpc could not bind, which it does not say: the errno of a bind of our own."""
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    try:
        with socket.create_server((config.host, config.port), family=family):
            return None
    except OSError as exc:
        return exc.errno


def _register(
    server: Any, backend: InferenceBackend, config: GrpcServerConfig
) -> health.aio.HealthServicer:
    """Inference, health and reflection on ``server`` (either engine: same registrations)."""
    servicer = InferenceServicer(backend, config.limits)
    add_inference_servicer(servicer, server)  # a message that does not decode: INVALID_ARGUMENT
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if config.reflection:
        names = (INFERENCE_SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name)
        enable_reflection(names, server)  # v1alpha and v1
    return health_servicer


@asynccontextmanager
async def serving_grpc(
    backend: InferenceBackend, config: GrpcServerConfig | None = None
) -> AsyncIterator[RunningGrpcServer]:
    running = await start_grpc_server(backend, config)
    try:
        yield running
    finally:
        await running.close()


GRPC_SERVER = web.AppKey("grpc_server", RunningGrpcServer)


def grpc_cleanup_ctx(
    backend_for: Callable[[web.Application], InferenceBackend],
    config: GrpcServerConfig | None = None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """An ``app.cleanup_ctx`` entry: the gRPC server lives exactly as long as the aiohttp app.

    ``backend_for`` is called at start-up, after earlier cleanup_ctx entries have set up what it
    needs (the relay). The running server is stored under ``app[GRPC_SERVER]``.
    """

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        async with serving_grpc(backend_for(app), config) as running:
            app[GRPC_SERVER] = running
            yield

    return lifecycle
