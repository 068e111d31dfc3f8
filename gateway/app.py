"""Assemble the gateway: the aiohttp application, its parts, and their start-up and shutdown."""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from gateway.admin import ADMIN, admin_gate, install_admin
from gateway.auth.tls import listener_context
from gateway.auth.wiring import auth_gate, check_listener, install_auth, shared_keys_ctx
from gateway.canary_learning import canary_learning_ctx
from gateway.chain.summary import add_chain_routes
from gateway.config import ConfigError, GatewayConfig
from gateway.errors import ApiError
from gateway.explain import add_explain_routes
from gateway.fleet import build_signal_hub
from gateway.http_api import add_routes
from gateway.http_socket.expect import guard_expect
from gateway.http_socket.policy import DOOR, DoorMetrics, DoorPolicy
from gateway.http_socket.protocol import DoorRunner, DoorServer
from gateway.idle_sweep import idle_sweep_ctx
from gateway.lean_door.door import LeanDoor
from gateway.lean_door.site import LeanSite
from gateway.loop_health import loop_health_ctx
from gateway.metrics import GatewayMetrics
from gateway.observability.fleet_status import FleetStatusCollector
from gateway.observability.status import add_status_routes
from gateway.pinning.wiring import dns_pins, install_dns_pins
from gateway.prefix_expiry import prefix_expiry_ctx
from gateway.prewarm import prewarm_ctx
from gateway.quota.limiter import QUOTAS
from gateway.quota.wiring import install_quotas
from gateway.relay import Relay
from gateway.relay_state import Builders, build_state
from gateway.state.wiring import SharedState, install_shared_state
from gateway.state_keys import CONFIG, METRICS, PUBLIC_BIND, RELAY, PublicBind
from routing.types import PolicyRouter

log = logging.getLogger("meridian.app")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves in OpenAI's shape; nothing leaks a traceback or the request body."""
    try:
        return await handler(request)
    except ApiError as err:
        return err.to_response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
            exc.status, "http_error"
        )
        message = f"{exc.reason}: {request.method} {request.path}"
        return ApiError(exc.status, message, "invalid_request_error", code).to_response()
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return ApiError(
            500, "internal gateway error", "server_error", "internal_error"
        ).to_response()


# aiohttp's default (128) overflows when thousands of clients connect at once (their SYNs are
# dropped and retried for seconds); the kernel caps this at net.core.somaxconn anyway.
_LISTEN_BACKLOG = 4096


def build_app(config: GatewayConfig, router: PolicyRouter | None = None) -> web.Application:
    app = web.Application(
        middlewares=[openai_errors, auth_gate, admin_gate],
        client_max_size=config.limits.max_body_bytes,
    )
    install_admin(app, config.admin.public_metrics)  # gateway/admin: which routes are admin-only
    metrics = GatewayMetrics()
    shared = SharedState.from_config(config, metrics.registry)
    # Pools, router and signal hub live in a RelayState that a reload rebuilds and swaps whole.
    pins = dns_pins(config.dns, lambda: relay.config.backends, metrics.registry)
    resolver = pins.resolver if pins is not None else None
    builders = Builders(
        hub=lambda cfg, registry: build_signal_hub(cfg, registry, shared.fleet, resolver),
        wrap_router=shared.wrap_router,
        seed_salt=shared.seed_salt(),
        resolver=resolver,
    )
    relay = Relay(
        build_state(config, shared.wrap_router(router) if router else None, builders=builders),
        metrics,
    )
    app[CONFIG] = config
    app[METRICS] = metrics
    app[RELAY] = relay
    app[DOOR] = DoorPolicy(config.door, DoorMetrics.on(metrics.registry), app[ADMIN].ports)
    authenticator = install_auth(app, config.auth)  # gateway/auth: keys, tenants, hop keys
    if (
        authenticator.enabled
        and config.auth.redis_keys
        and config.state.backend.startswith("redis")
    ):
        from gateway.state.connect import redis_client

        app.cleanup_ctx.append(
            shared_keys_ctx(
                lambda: redis_client(config.state), config.state.key_prefix, metrics.registry
            )
        )
    metrics.registry.register(FleetStatusCollector(lambda: relay.state))

    async def upstream_pool(app: web.Application) -> AsyncIterator[None]:
        yield
        await relay.pool.close()

    async def signals(app: web.Application) -> AsyncIterator[None]:
        await relay.fleet.start()
        yield
        await relay.fleet.stop()

    app.cleanup_ctx.append(upstream_pool)
    # Starts before the hub, stops after it; the state route follows the hub a reload swaps in.
    install_shared_state(app, shared, lambda: relay.fleet)
    install_quotas(app, config.quotas, metrics.registry, shared)  # gateway/quota: key, tenant
    install_dns_pins(app, pins)  # gateway/pinning: backend hosts resolved before listening
    app.cleanup_ctx.append(signals)
    app.cleanup_ctx.append(loop_health_ctx(metrics.registry))
    app.cleanup_ctx.append(
        prefix_expiry_ctx(
            lambda: relay.router, config.routing.prefix_sweep_interval_s, metrics.registry
        )
    )
    app.cleanup_ctx.append(
        prewarm_ctx(
            lambda: relay.router,
            lambda: relay.fleet,
            config.signals.tick_interval_s,
            metrics.registry,
        )
    )
    app.cleanup_ctx.append(  # refilled quota buckets, idle GeoIP entries (gateway/idle_sweep.py)
        idle_sweep_ctx(
            lambda: app[QUOTAS],
            lambda: relay.fleet.geo,
            config.routing.prefix_sweep_interval_s,
            metrics.registry,
        )
    )
    app.cleanup_ctx.append(
        canary_learning_ctx(
            lambda: relay.router,
            lambda: relay.fleet,
            config.signals.tick_interval_s,
            metrics.registry,
        )
    )
    if config.listen.grpc_port is not None:
        # Imported here: grpc loads only when the gRPC door is configured.
        from gateway.grpc.mount import grpc_server_ctx

        app.cleanup_ctx.append(grpc_server_ctx)  # after the pool: stops before it closes
    add_routes(app)
    add_explain_routes(app)
    add_chain_routes(app)
    add_status_routes(app)  # GET /status, /status.json (gateway/observability/status.py)
    guard_expect(app, config.limits.max_body_bytes)  # after every route is registered
    return app


@dataclass
class RunningGateway:
    runner: web.AppRunner
    host: str
    port: int
    admin_host: str = "127.0.0.1"
    admin_port: int = 0
    scheme: str = "http"  # https with listen.tls

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def admin_url(self) -> str:
        """The admin listener (gateway/admin): state, metrics, readiness details."""
        host = f"[{self.admin_host}]" if ":" in self.admin_host else self.admin_host
        return f"http://{host}:{self.admin_port}"

    @property
    def app(self) -> web.Application:
        return self.runner.app

    async def close(self) -> None:
        await self.runner.cleanup()


async def start_gateway(
    config: GatewayConfig,
    host: str | None = None,
    port: int | None = None,
    *,
    reuse_port: bool = False,
    prepare: Callable[[web.Application], None] | None = None,
) -> RunningGateway:
    """Start serving on the running event loop; returns once the socket is listening.
    ``reuse_port``: bind with SO_REUSEPORT (the workers of ``--workers N``); ``prepare`` runs on
    the app before it starts."""
    bind_host = host or config.listen.host
    app = build_app(config)
    app[PUBLIC_BIND] = PublicBind(bind_host, reuse_port)  # the gRPC listener's too (grpc/mount)
    if prepare is not None:
        prepare(app)
    # handler_cancellation: a client that goes away cancels its handler, and with it the
    # upstream request — the GPU stops generating for nobody.
    runner = DoorRunner(
        app,
        door=app[DOOR],  # gateway/http_socket: connection caps, header deadline
        handler_cancellation=True,
        access_log=None,
        keepalive_timeout=config.door.keepalive_timeout_s,
    )
    try:
        await runner.setup()  # a start-up step that fails (e.g. a DNS pin) unwinds the others
        check_listener(config.auth, bind_host)  # auth unconfigured: loopback only
        tls = listener_context(config.listen.tls)  # gateway/auth/tls.py: HTTPS, mTLS hops
    except BaseException:
        await runner.cleanup()
        raise
    public_port = config.listen.port if port is None else port
    site = _public_site(runner, config, tls, bind_host, public_port, reuse_port)
    try:
        await site.start()
    except BaseException:  # a port in use: close what setup() opened (upstream sessions)
        await runner.cleanup()
        raise
    actual_port = _bound_port(site) or (port or config.listen.port)
    admin = config.admin
    admin_port = admin.port_for(config.listen.port if port is None else port)
    if admin_port != 0 and admin_port == actual_port:
        await runner.cleanup()
        raise ConfigError(f"admin.port {admin_port} is the public listener's port")
    admin_site = web.TCPSite(runner, admin.host, admin_port, reuse_port=reuse_port)
    try:
        await admin_site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound_admin = _bound_port(admin_site) or admin_port
    app[ADMIN].ports.add(bound_admin)
    scheme = "http" if tls is None else "https"
    return RunningGateway(runner, bind_host, actual_port, admin.host, bound_admin, scheme)


def _public_site(
    runner: DoorRunner,
    config: GatewayConfig,
    tls: ssl.SSLContext | None,
    host: str,
    port: int,
    reuse_port: bool,
) -> web.TCPSite:
    """The public listener: the lean door in front of aiohttp's server (gateway/lean_door),
    unless the operator turned it off or the listener speaks TLS."""
    server = runner.server
    if config.door.lean and tls is None and isinstance(server, DoorServer):
        lean = LeanDoor(runner.app, server.handler, runner.app[METRICS].registry)
        server.lean = lean  # its connections are shut down with aiohttp's
        return LeanSite(runner, lean, host, port, reuse_port=reuse_port, backlog=_LISTEN_BACKLOG)
    return web.TCPSite(
        runner, host, port, reuse_port=reuse_port, backlog=_LISTEN_BACKLOG, ssl_context=tls
    )


def _bound_port(site: web.TCPSite) -> int | None:
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else None
