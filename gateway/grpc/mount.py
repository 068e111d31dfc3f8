"""Mount the gRPC door on the gateway's aiohttp application (same process, loop and Relay).

``app.cleanup_ctx.append(grpc_server_ctx)`` in ``gateway.app.build_app``: when
``listen.grpc_port`` is configured the gRPC server starts after the HTTP app's earlier contexts
and stops before them; the running server is ``app[GRPC_SERVER]`` (its ``port`` when the
configured port was 0, ``drain()`` to report NOT_SERVING before shutdown).
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import AsyncIterator, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from gateway.auth.tls import ListenTlsConfig, grpc_credentials, listener_context
from gateway.auth.wiring import AUTH, door_check
from gateway.config import GatewayConfig
from gateway.config_backends import GrpcConnectionsConfig
from gateway.grpc.relay_backend import RelayBackend
from gateway.grpc.server import GRPC_SERVER, GrpcServerConfig, serving_grpc
from gateway.grpc.servicer import ServicerLimits
from gateway.grpc_h2.limits import CLOSE_REASONS, LifetimeLimits
from gateway.http_socket.policy import DOOR
from gateway.quota.limiter import QUOTAS
from gateway.state_keys import CONFIG, METRICS, PUBLIC_BIND, RELAY, PublicBind

__all__ = ["GRPC_SERVER", "grpc_server_config", "grpc_server_ctx"]


def grpc_server_config(
    config: GatewayConfig, bind: PublicBind | None = None
) -> GrpcServerConfig | None:
    """The gRPC listener the gateway config asks for, or None when it asks for none, bound as
    the public HTTP listener is (``bind``: its address and SO_REUSEPORT; default: the config's
    ``listen.host``)."""
    port = config.listen.grpc_port
    if port is None:
        return None
    limit = config.limits.max_body_bytes
    # A protobuf request is never much bigger than its JSON body: the HTTP door's body limit
    # bounds both the wire message (RESOURCE_EXHAUSTED) and the converted body (INVALID_ARGUMENT).
    engine = config.listen.grpc_engine
    tls = config.listen.tls  # the same TLS as the HTTP listener
    return GrpcServerConfig(
        host=config.listen.host if bind is None else bind.host,
        port=port,
        max_receive_message_bytes=limit,
        limits=ServicerLimits(max_body_bytes=limit),
        credentials=grpc_credentials(tls) if engine == "grpcio" else None,
        engine=engine,
        ssl_context=h2_context(tls) if engine == "h2" else None,
        reuse_port=False if bind is None else bind.reuse_port,
        lifetime=lifetime_limits(config.listen.grpc_connections),
    )


def closed_counter(registry: CollectorRegistry) -> Callable[[str], None]:
    """``meridian_grpc_connections_closed_total{reason}``: the h2 engine's own closes (every
    reason there from the start, at 0, so a rate over it exists before the first)."""
    counter = Counter(
        "meridian_grpc_connections_closed",
        "gRPC connections the gateway closed itself, by why (h2 engine).",
        ["reason"],
        registry=registry,
    )
    children = {reason: counter.labels(reason) for reason in CLOSE_REASONS}
    return lambda reason: children[reason].inc()


def lifetime_limits(section: GrpcConnectionsConfig) -> LifetimeLimits:
    return LifetimeLimits(section.max_age_s, section.max_age_grace_s, section.max_idle_s)


def h2_context(tls: ListenTlsConfig | None) -> ssl.SSLContext | None:
    """``listen.tls`` for the h2 engine: the HTTP listener's context, offering only h2 (ALPN)."""
    context = listener_context(tls)
    if context is not None:
        context.set_alpn_protocols(["h2"])
    return context


async def grpc_server_ctx(app: web.Application) -> AsyncIterator[None]:
    server_config = grpc_server_config(app[CONFIG], app.get(PUBLIC_BIND))
    if server_config is None:
        yield
        return
    backend = RelayBackend(app[RELAY], app[METRICS])
    limits = dataclasses.replace(
        server_config.limits, authenticate=door_check(app[AUTH], app[QUOTAS])
    )
    # The h2 engine's connections count against the HTTP door's caps (one fd budget); grpc.aio's
    # against its total, counted apart.
    server_config = dataclasses.replace(
        server_config,
        limits=limits,
        connection_caps=app[DOOR],
        connection_closed=closed_counter(app[METRICS].registry),
    )
    async with serving_grpc(backend, server_config) as running:
        app[GRPC_SERVER] = running
        yield
